#!/usr/bin/env bash
# The kind tier: the product's headline path on a real kind cluster. This script sets up what the tier
# needs, runs its test and takes the set-up down again; every check is in the test, tests/e2e/kind.rs:
#
#   bad input refused (no record, no cluster left) → lab up --runtime kind --database --nodes 2 (GPUs split
#   2 + 2, ranks on both nodes) → status, incident, console (in tmux) → Prometheus 3 in the cluster agrees
#   with the lab's alerts on a throttled rank → a checkpoint request from another pod without the lab's
#   token refused, nothing changed → the seed's drills with their traps first → slow-storage with the
#   reference MCP agent → (all drills) the other built-in drills, traps first → unplaceable-rank last →
#   lab down → nothing left (cluster and kind's network gone)
#
#   scripts/ci/kind-e2e.sh
#
# Where Docker answers (a laptop, a hosted runner), the machine's Docker and kind are used with the pinned
# node image. Where it does not and the script runs as root on Linux (a CI machine without a registry), it
# starts the project's private engine (scripts/env/kind/engine.sh), builds the kind CLI and the offline node
# image (scripts/env/kind/tools.sh, scripts/env/kind/node-image.sh) and stops the engine again at the end.
#
# CI runs the seed's three drills (traps first) and the MCP agent's drill; with LAB_E2E_ALL_DRILLS=1 the
# tier runs all eleven built-in drills (about 14 minutes more). Which drills, with which traps and
# deadlines, and what each costs: the head of tests/e2e/kind.rs.
#
# Environment: LAB_E2E_NAME (kind-e2e), LAB_E2E_REPORTS (target/kind-e2e), LAB_BIN (built when unset, with
# the test, in the debug profile CI uses), LAB_E2E_TEST (the test's executable, as `scripts/ci/test-bins.sh
# lab-tests kind` prints it; built when unset), LAB_E2E_ALL_DRILLS=1 (every built-in drill),
# LAB_E2E_NODES (2: the lab's node count, at least 2), LAB_E2E_KEEP=1 (leave a lab that failed a check up,
# and the private engine).
# The figures (set-up, lab up and down, each drill) are printed at the end and kept as
# docs/figures/kind-e2e.md when the tier ran to its end. Exits non-zero when any check fails; every check
# that cannot be made fails the run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NAME=${LAB_E2E_NAME:-kind-e2e}
REPORTS=${LAB_E2E_REPORTS:-$root/target/kind-e2e}
NODES=${LAB_E2E_NODES:-2}
[ "$NODES" -ge 2 ] || { echo "LAB_E2E_NODES=$NODES: the tier runs the lab on at least 2 nodes" >&2; exit 2; }
E2E_T0=$(date +%s)
mkdir -p "$REPORTS"
REPORTS=$(cd "$REPORTS" && pwd)

E2E_TAG=kind-e2e
. "$root/scripts/ci/e2e-common.sh"

# The set-up's figures first; the test adds its own to the same file.
FIGURES="$REPORTS/figures.tsv"
: > "$FIGURES"
figure() { printf '%s\t%s\n' "$1" "$2" >> "$FIGURES"; say "figure: $1 = $2"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# The slow-compute drill's right fix reads `lab rank procs --json` with it.
command -v jq >/dev/null || die "jq is not installed: apt-get install jq (or brew install jq)"

# --- the lab's binaries and the test ---------------------------------------------------------------------
# Built once, in one profile: the binaries the offline lab image is made of and the test that runs them.
if [ -z "${LAB_BIN:-}" ]; then
  say "building the lab (debug)"
  (cd "$root" && cargo build --locked --workspace --bins >&2)
  LAB_BIN="$root/target/debug/lab"
fi
[ -x "$LAB_BIN" ] || die "LAB_BIN=$LAB_BIN is not an executable: build the lab (cargo build --workspace --bins) or leave LAB_BIN unset"
test_bin=${LAB_E2E_TEST:-}
if [ -z "$test_bin" ]; then
  test_bin=$("$root/scripts/ci/test-bins.sh" lab-tests kind | cut -f2) || die "building the kind tier's test failed"
fi
[ -x "$test_bin" ] || die "the kind tier's test $test_bin is not an executable"

# --- the engine, kind and the node image ---------------------------------------------------------------
engine=host
if [ -z "${DOCKER_HOST:-}" ] && ! docker info >/dev/null 2>&1; then
  [ "$(uname -s)" = Linux ] && [ "$(id -u)" -eq 0 ] \
    || die "Docker does not answer: start Docker (this script starts a private engine only as root on Linux)"
  engine=private
fi
cleanup() {
  local rc=$?
  if [ "$engine" = private ] && [ "${LAB_E2E_KEEP:-0}" != 1 ]; then
    say "stopping the private engine"
    "$root/scripts/env/kind/engine.sh" down >&2 || { say "FAILED: the private engine left something behind"; rc=1; }
  fi
  say "done in $(( $(date +%s) - E2E_T0 )) s, exit $rc"
  exit "$rc"
}
trap cleanup EXIT
node_image=
if [ "$engine" = private ]; then
  say "no Docker answers: starting the project's private engine"
  "$root/scripts/env/kind/engine.sh" up >&2 || die "the private Docker engine did not start"
  eval "$("$root/scripts/env/kind/engine.sh" env)"
fi
if ! command -v kind >/dev/null; then
  say "kind is not installed: building the pinned kind CLI"
  eval "$("$root/scripts/env/kind/tools.sh")"
fi
say "$(kind version)"
if [ "$engine" = private ]; then
  t=$(now)
  node_image=$("$root/scripts/env/kind/node-image.sh" | tail -n 1 | awk '{print $1}')
  [ -n "$node_image" ] || die "the offline node image was not built"
  figure "node image ready (s)" "$(since "$t")"
fi

# weed, busybox and Debian's prometheus (promtool's package) for the images where their own cannot be
# pulled; tmux for the console, the MCP SDK for the reference agent, kubectl for the checks in the cluster.
env_file=$(mktemp)
"$root/scripts/tools.sh" weed promtool tmux busybox postgres mcp > "$env_file" || die "installing weed, promtool, tmux, busybox, PostgreSQL (the database image is made from it) and the MCP Python SDK failed"
# shellcheck source=/dev/null
. "$env_file"
if ! command -v kubectl >/dev/null; then
  "$root/scripts/tools.sh" kubectl > "$env_file" || die "installing kubectl failed"
  # shellcheck source=/dev/null
  . "$env_file"
fi
rm -f "$env_file"
if ! docker image inspect prom/prometheus:v3.5.0 >/dev/null 2>&1 && ! docker pull -q prom/prometheus:v3.5.0 >/dev/null 2>&1; then
  # Without a registry the lab builds Prometheus' image from the `prometheus` first on PATH: the Prometheus
  # 3 a connected machine pulls (prom/prometheus:v3.5.0), built from its Go module, rather than Debian's
  # 2.42 (scripts/env/prometheus/build.sh; cached, so .ci/run builds it in the background beforehand).
  say "prom/prometheus:v3.5.0 cannot be pulled: Prometheus 3 from its Go module"
  t=$(now)
  prom_env=$("$root/scripts/env/prometheus/build.sh" --env) || die "building Prometheus 3 failed"
  eval "$prom_env"
  figure "Prometheus 3 ready (s)" "$(since "$t")"
fi

# --- the tier's checks -----------------------------------------------------------------------------------
# From the test package's folder, as `cargo test` runs it; LAB_E2E_KIND=1 tells the test that the
# environment is ready (run alone, it fails naming this script).
say "running the kind tier's test ($test_bin)"
rc=0
(cd "$root/tests" && LAB_E2E_KIND=1 LAB_E2E_T0="$E2E_T0" LAB_E2E_NAME="$NAME" LAB_E2E_REPORTS="$REPORTS" \
  LAB_E2E_NODES="$NODES" LAB_E2E_NODE_IMAGE="$node_image" LAB_BIN="$LAB_BIN" \
  "$test_bin" --exact kind_tier --nocapture --test-threads=1) || rc=$?

say "figures:"
figures=$({ column -t -s "$(printf '\t')" "$FIGURES" || cat "$FIGURES"; })
if grep -q '^lab down' "$FIGURES"; then
  # The tier ran to its end (with its failed drills, if any): kept as docs/figures/kind-e2e.md
  # (scripts/bench/figures-write.sh), which docs/figures.md indexes.
  case "$LAB_BIN" in */release/*) profile=release ;; */debug/*) profile=debug ;; *) profile=unknown ;; esac
  command="scripts/ci/kind-e2e.sh (profile $profile)"
  if [ "${LAB_E2E_ALL_DRILLS:-0}" = 1 ]; then command="LAB_E2E_ALL_DRILLS=1 $command"; fi
  printf '%s\n' "$figures" | "$root/scripts/bench/figures-write.sh" kind-e2e "$command" >&2
else
  printf '%s\n' "$figures" >&2
fi
[ "$rc" -eq 0 ] || die "the kind tier's test failed (exit $rc; its reports: $REPORTS)"
say "all passed"
