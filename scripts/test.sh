#!/usr/bin/env bash
# The project's test command: installs what the tests need (SeaweedFS, promtool, tmux) when missing,
# checks formatting and lints, builds every binary, runs the unit and integration tests, then the
# end-to-end tests of the local lab one at a time (they share the machine's cores with real processes).
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(scripts/tools.sh weed promtool tmux)"

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== build"
cargo build --workspace --bins --locked

echo "== unit and integration tests"
cargo test --workspace --locked --exclude lab-tests

echo "== end-to-end tests (local lab, one at a time)"
cargo test -p lab-tests --locked -- --test-threads=1
