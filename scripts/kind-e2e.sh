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
E2E_T0=$(date +%s)
mkdir -p "$REPORTS"

E2E_TAG=kind-e2e
. "$root/scripts/e2e-common.sh"

command -v docker >/dev/null || die "docker is not installed: install Docker (the kind runtime needs it)"
docker info >/dev/null 2>&1 || die "the Docker daemon does not answer: start it"
command -v kind >/dev/null || die "kind is not installed: go install sigs.k8s.io/kind@v0.30.0"
command -v jq >/dev/null || die "jq is not installed: apt-get install jq (or brew install jq)"

if [ -z "${LAB_BIN:-}" ]; then
  say "building the lab CLI"
  (cd "$root" && cargo build --release -p lab-cli >&2)
  LAB_BIN="$root/target/release/lab"
fi

cleanup() {
  local rc=$?
  if [ "${LAB_E2E_KEEP:-0}" = 1 ]; then
    say "LAB_E2E_KEEP=1: leaving lab $NAME up (lab down --name $NAME removes it)"
  else
    say "lab down"
    lab down >&2 || say "lab down failed: remove the cluster with kind delete cluster --name lab-$NAME"
  fi
  say "done in $(( $(date +%s) - E2E_T0 )) s, exit $rc"
}
trap cleanup EXIT

say "lab up --runtime kind"
(cd "$root" && lab up --runtime kind) || die "lab up"
expect_all_ready "after lab up"
status_json > "$REPORTS/status-up.json"

if have_drills; then
  for d in "${DRILLS[@]}"; do
    run_drill "$d"
    expect_all_ready "after drill $d"
  done
else
  # Without the drill engine, the same three faults by hand, each checked while injected.
  say "no drill engine in this build: injecting the three faults with 'lab fault'"
  lab fault inject slow-storage --server 1 --delay 300ms >&2 || die "inject slow-storage"
  expect_all_ready "slow-storage injected"
  lab fault clear --all >&2 || die "clear slow-storage"

  lab fault inject throttled-rank --rank 1 --cpu 150m >&2 || die "inject throttled-rank"
  expect_all_ready "throttled-rank injected"
  wait_status "rank-1 runs at 150m while its template says 400m" 60 \
    '.pods[] | select(.name == "rank-1") | .resources.cpu_live == "150m" and .resources.cpu_template == "400m"'
  lab fault clear --all >&2 || die "clear throttled-rank"

  lab fault inject unplaceable-rank --ranks 5 >&2 || die "inject unplaceable-rank"
  wait_status "rank-4 Pending (Insufficient GPU), world size 5" 90 \
    '.world_size == 5 and any(.pods[]; .name == "rank-4" and .phase == "Pending" and ((.reason // "") | test("Insufficient")))'
  lab fault clear --all >&2 || die "clear unplaceable-rank"
  wait_status "back to 4 ranks and world size 4" 120 '.world_size == 4 and .ranks_desired == 4'
fi
status_json > "$REPORTS/status-end.json"
finish
