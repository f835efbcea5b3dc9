#!/usr/bin/env bash
# The project's test command: installs what the tests need (SeaweedFS, promtool, tmux, shellcheck, Chromium,
# PostgreSQL, the MCP Python SDK and Inspector) when missing, checks formatting and lints (Rust and shell), builds every binary, runs the unit and integration
# tests, then the end-to-end tests of the local lab one at a time (they share the machine's cores with real
# processes). Every end-to-end test binary runs even when one fails, so one red test hides no other.
set -euo pipefail
cd "$(dirname "$0")/.."

# An install that fails stops here, with its own error (an `eval "$(…)"` would hide the failure).
env_file=$(mktemp)
trap 'rm -f "$env_file"' EXIT
if ! scripts/tools.sh weed promtool tmux shellcheck chromium postgres mcp > "$env_file"; then
  echo "installing the test tools failed (see above)" >&2
  exit 1
fi
# shellcheck source=/dev/null
. "$env_file"

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Warnings and errors fail the run; shellcheck's style notes are advice.
mapfile -t shell_scripts < <(git ls-files 'scripts/*.sh' .ci/run 2>/dev/null || ls scripts/*.sh scripts/*/*.sh scripts/*/*/*.sh .ci/run)
shellcheck -x -S warning "${shell_scripts[@]}"

echo "== build"
cargo build --workspace --bins --locked

echo "== unit and integration tests"
cargo test --workspace --locked --exclude lab-tests

echo "== end-to-end tests (local lab, one at a time)"
# Built with the feature set of the workspace's other tests (`cargo test -p lab-tests` would build tokio,
# hyper, kube and the rest a second time), then run one binary after the other, from the package's folder
# as `cargo test` does. Every binary runs even when one fails.
bins=$(scripts/ci/test-bins.sh lab-tests)
mapfile -t e2e <<<"$bins"
# Each binary's output is kept too: a failure's message is printed again at the end, where a log cut to its
# head and tail still shows it.
logs=$(mktemp -d)
# The tests' labs keep their state in temporary folders under one of this run's own. A test binary that is
# ended from outside (Ctrl-C, a CI timeout) cannot take its lab down, so this script does, by each lab's
# recorded processes (`lab down`), before it removes the folder: no lab keeps training on the machine after
# the run.
e2e_tmp=$(mktemp -d -t lab-e2e-run-XXXXXX)
# Open to every user, as /tmp is: one test runs its lab as a user of its own (local_lab.rs, without root).
chmod 1777 "$e2e_tmp"
sweep_labs() {
  local lab state
  for lab in "$e2e_tmp"/*/*/lab.json; do
    [ -f "$lab" ] || continue
    lab=${lab%/lab.json}
    state=${lab%/*}
    echo "taking down lab ${lab##*/}, left up by an interrupted test" >&2
    LAB_STATE_DIR=$state target/debug/lab down --name "${lab##*/}" >&2 || true
  done
  rm -rf "$e2e_tmp"
}
trap 'sweep_labs; rm -f "$env_file"; rm -rf "$logs"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
failed=()
for line in "${e2e[@]}"; do
  name=${line%%$'\t'*}
  # The kind tier's test needs the cluster scripts/ci/kind-e2e.sh sets up, and runs there (.ci/run's kind tier).
  if [ "$name" = kind ]; then echo "     Skipping e2e/kind.rs: the kind tier, run by scripts/ci/kind-e2e.sh"; continue; fi
  echo "     Running e2e/$name.rs"
  (cd tests && TMPDIR=$e2e_tmp "${line#*$'\t'}" --test-threads=1) 2>&1 | tee "$logs/$name.log" || failed+=("$name")
done
if [ ${#failed[@]} -gt 0 ]; then
  for name in "${failed[@]}"; do
    echo "── why e2e/$name.rs failed" >&2
    # From each panic to its backtrace (or 40 lines), long lines cut: the message, not the whole output.
    awk '/panicked at/ {on=1; n=0} on && /^(stack backtrace:|note: run with)/ {on=0} on && n++ < 40 {print substr($0, 1, 1500)}' \
      "$logs/$name.log" >&2
  done
  echo "end-to-end tests failed: ${failed[*]}" >&2
  exit 1
fi
