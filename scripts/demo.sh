#!/usr/bin/env bash
# The demo: installs SeaweedFS when missing, builds the lab, and runs the seed story end to end on the
# default runtime (kind where Docker and kind work, else local processes), then takes the lab down.
# Extra arguments go to `lab demo` (e.g. --keep to leave the lab running for `lab console`).
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(scripts/tools.sh weed)"
echo "== building the lab (release)"
cargo build --release --workspace --bins --locked
export PATH="$PWD/target/release:$PATH"
exec lab demo "$@"
