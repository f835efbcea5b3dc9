#!/usr/bin/env bash
# The demo: installs SeaweedFS when missing, builds the lab, and runs the seed story end to end on the
# default runtime (kind where Docker and kind work, else local processes), then takes the lab down.
# Extra arguments go to `lab demo` (e.g. --keep to leave the lab running for `lab console`).
#
# The build is the dev profile the test command builds too (one build serves both commands): the paths the
# lab measures (the ranks' arithmetic, the latency proxy's copy loop, the random numbers) are optimised in
# it as in a release build (Cargo.toml), and from a fresh clone on two cores it is ready in under half the
# time a release build takes (docs/figures/demo-start.md).
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(scripts/tools.sh weed)"
echo "== building the lab"
cargo build --workspace --bins --locked
export PATH="$PWD/target/debug:$PATH"
exec lab demo "$@"
