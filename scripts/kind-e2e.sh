#!/usr/bin/env bash
# End-to-end test of the kind runtime, for machines with Docker and kind (a laptop, or CI):
#
#   lab up --runtime kind  →  the three built-in drills  →  checks through `lab status --json`  →  lab down
#
#   scripts/kind-e2e.sh            (LAB_E2E_NAME, LAB_E2E_REPORTS and LAB_BIN override the defaults)
#
# The cluster is deleted on exit, whatever happened, unless LAB_E2E_KEEP=1. Each drill writes its JSON
# and JUnit reports under $LAB_E2E_REPORTS. Exits non-zero on the first failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=${LAB_E2E_NAME:-kind-e2e}
REPORTS=${LAB_E2E_REPORTS:-$root/target/kind-e2e}
DRILLS=(slow-storage throttled-rank unplaceable-rank)
T0=$(date +%s)
mkdir -p "$REPORTS"

say() { printf '[kind-e2e +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

command -v docker >/dev/null || die "docker is not installed: install Docker (the kind runtime needs it)"
docker info >/dev/null 2>&1 || die "the Docker daemon does not answer: start it"
command -v kind >/dev/null || die "kind is not installed: go install sigs.k8s.io/kind@v0.30.0"
command -v jq >/dev/null || die "jq is not installed: apt-get install jq (or brew install jq)"

if [ -z "${LAB_BIN:-}" ]; then
  say "building the lab CLI"
  (cd "$root" && cargo build --release -p lab-cli >&2)
  LAB_BIN="$root/target/release/lab"
fi
lab() { "$LAB_BIN" "$@"; }

cleanup() {
  local rc=$?
  if [ "${LAB_E2E_KEEP:-0}" = 1 ]; then
    say "LAB_E2E_KEEP=1: leaving lab $NAME up (lab down --name $NAME removes it)"
  else
    say "lab down"
    lab down --name "$NAME" >&2 || say "lab down failed: remove the cluster with kind delete cluster --name lab-$NAME"
  fi
  say "done in $(( $(date +%s) - T0 )) s, exit $rc"
}
trap cleanup EXIT

status() { lab status --name "$NAME" --json; }

# All ranks and storage servers Running and Ready: what Kubernetes shows during every one of these faults.
expect_all_ready() {
  local s; s=$(status)
  echo "$s" | jq -e '[.pods[] | select(.role == "rank" or .role == "storage-server")] | all(.phase == "Running" and .ready)' >/dev/null \
    || { echo "$s" | jq '.pods[] | {name, phase, ready, reason}' >&2; die "$1: not every rank and storage server is Running and Ready"; }
}

say "lab up --runtime kind"
(cd "$root" && lab up --runtime kind --name "$NAME") || die "lab up"
expect_all_ready "after lab up"
status > "$REPORTS/status-up.json"

if lab drill --help >/dev/null 2>&1; then
  for d in "${DRILLS[@]}"; do
    say "drill $d"
    lab drill run "$d" --name "$NAME" --json "$REPORTS/$d.json" --junit "$REPORTS/$d.xml" >&2 || die "drill $d"
    expect_all_ready "after drill $d"
  done
else
  # Without the drill engine, the same three faults by hand, each checked while injected.
  say "no 'lab drill' in this build: injecting the three faults with 'lab fault'"
  lab fault inject slow-storage --name "$NAME" --server 1 --delay 300ms >&2 || die "inject slow-storage"
  expect_all_ready "slow-storage injected"
  status | jq -e '.pods[] | select(.name == "storage-1") | .containers' >/dev/null || die "storage-1 not in status"
  lab fault clear --all --name "$NAME" >&2 || die "clear slow-storage"

  lab fault inject throttled-rank --name "$NAME" --rank 1 --cpu 150m >&2 || die "inject throttled-rank"
  expect_all_ready "throttled-rank injected"
  status | jq -e '.pods[] | select(.name == "rank-1") | .resources | .cpu_live == "150m" and .cpu_template == "400m"' >/dev/null \
    || die "rank-1 is not at 150m live with a 400m template"
  lab fault clear --all --name "$NAME" >&2 || die "clear throttled-rank"

  lab fault inject unplaceable-rank --name "$NAME" --ranks 5 >&2 || die "inject unplaceable-rank"
  sleep 5
  status | jq -e '.world_size == 5 and (.pods[] | select(.name == "rank-4") | .phase == "Pending" and (.reason | test("Insufficient")))' >/dev/null \
    || die "rank-4 is not Pending with an Insufficient reason"
  lab fault clear --all --name "$NAME" >&2 || die "clear unplaceable-rank"
fi
status > "$REPORTS/status-end.json"
say "all passed"
