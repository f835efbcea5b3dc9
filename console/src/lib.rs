//! The live terminal console: per-storage-server latency against pod Ready.
