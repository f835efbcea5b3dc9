//! The lab's faults as data, with apply, recover, proof and a ledger of change records.
