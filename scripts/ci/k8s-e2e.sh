#!/usr/bin/env bash
# End-to-end test on a real single-node Kubernetes built on this machine (scripts/env/k8s-node/), through the
# existing-cluster runtime, after the control-plane tier:
#
#   control-plane tier (scripts/ci/kube-control-plane.sh test: runtime-kube/tests/control_plane.rs against a real
#   API server, scheduler and controllers, no kubelet) → node up → lab up --kubeconfig … → the three
#   built-in drills → the three faults by hand, checked through `lab status --json` → lab down → node down
#
# Checked on the real cluster, each while its fault is injected:
#   slow-storage      4/4 ranks Ready; the delay path the lab reports (netem, or the latency proxy where the
#                     kernel has no sch_netem); storage-1's reads, as the ranks see them, slower than each
#                     sibling's by most of the delay
#   throttled-rank    4/4 Ready; rank-1's live CPU limit 150m after a real in-place resize while the
#                     StatefulSet template says 400m; the container's cgroup quota really changed
#   unplaceable-rank  rank-4 Pending with the real scheduler's "Insufficient lab.dev/gpu" message; the four
#                     running ranks Ready; world size 5
# Anything this tier cannot check fails it: a build without the drill engine, a `lab down` that fails.
#
#   scripts/ci/k8s-e2e.sh       as root (the node runs containers). LAB_E2E_KEEP_NODE=1 leaves the node up;
#                            LAB_E2E_NAME, LAB_E2E_REPORTS, LAB_BIN as in kind-e2e.sh.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NAME=${LAB_E2E_NAME:-k8s-e2e}
REPORTS=${LAB_E2E_REPORTS:-$root/target/k8s-e2e}
NODE_UP=${LAB_E2E_NODE_UP:-$root/scripts/env/k8s-node/up.sh}
NODE_DOWN=${LAB_E2E_NODE_DOWN:-$root/scripts/env/k8s-node/down.sh}
E2E_T0=$(date +%s)
mkdir -p "$REPORTS"
# The node's parameters (state directory, admin kubeconfig, GPU resource) are the node scripts' own;
# sourced first, so that the e2e helpers below take precedence over its own say/kc.
. "$root/scripts/env/k8s-node/lib.sh"
E2E_TAG=k8s-e2e
. "$root/scripts/ci/e2e-common.sh"
KUBECONFIG_LAB=${LAB_E2E_KUBECONFIG:-$KUBECONFIG_ADMIN}

[ "$(id -u)" -eq 0 ] || die "run as root: the node runs a kubelet and containers"
command -v jq >/dev/null || die "jq is not installed: apt-get install jq"

if [ -z "${LAB_BIN:-}" ]; then
  say "building the lab CLI"
  (cd "$root" && cargo build --release -p lab-cli >&2)
  LAB_BIN="$root/target/release/lab"
fi

node_started=0
cleanup() {
  local rc=$?
  if [ "$node_started" = 1 ]; then
    say "lab down"
    lab_down || rc=1
  fi
  if [ "$node_started" = 1 ] && [ "${LAB_E2E_KEEP_NODE:-0}" != 1 ]; then
    say "node down"
    "$NODE_DOWN" >&2 || { say "FAILED: node down left something behind: see its output"; rc=1; }
  fi
  say "done in $(( $(date +%s) - E2E_T0 )) s, exit $rc"
  exit "$rc"
}
trap cleanup EXIT

# The control-plane tier first: strict validation of every manifest, the controllers and the scheduler,
# on its own loopback control plane (it needs the only schedulable node to be its own, so it does not run
# against the node below). It brings its control plane down whether it passes or not.
say "control-plane tier"
"$root/scripts/ci/kube-control-plane.sh" test >&2 || die "the control-plane tier (runtime-kube/tests/control_plane.rs)"

say "node up"
"$NODE_UP" >&2 || die "the node did not come up"
node_started=1
[ -r "$KUBECONFIG_LAB" ] || die "no kubeconfig at $KUBECONFIG_LAB"

# The node has no registry: the lab image was imported by the node scripts, so never pull.
say "lab up --kubeconfig $KUBECONFIG_LAB"
lab up --kubeconfig "$KUBECONFIG_LAB" --pull-policy Never --gpu-resource "$GPU_RESOURCE" --baseline-timeout 300s >&2 || die "lab up"
expect_all_ready "after lab up"
status_json > "$REPORTS/status-up.json"
NS=$(jq -r '.lab as $l | "straggler-lab-" + $l' "$REPORTS/status-up.json")

kc() { KUBECONFIG="$KUBECONFIG_LAB" "$KUBECTL" "$@"; }
KUBECTL=$(command -v kubectl || true)
if [ -z "$KUBECTL" ]; then eval "$("$root/scripts/tools.sh" kubectl)"; KUBECTL=$(command -v kubectl); fi

# The CFS quota of rank-1's container, read from the node's cgroup filesystem (v1 or v2), in microseconds.
rank1_quota_us() {
  local cid dir
  cid=$(kc -n "$NS" get pod rank-1 -o jsonpath='{.status.containerStatuses[?(@.name=="rank")].containerID}')
  cid=${cid#*://}
  [ -n "$cid" ] || { echo "?"; return; }
  dir=$(find /sys/fs/cgroup -type d -name "*${cid}*" 2>/dev/null | while read -r d; do
      if [ -f "$d/cpu.cfs_quota_us" ] || [ -f "$d/cpu.max" ]; then echo "$d"; break; fi; done)
  if [ -f "$dir/cpu.cfs_quota_us" ]; then cat "$dir/cpu.cfs_quota_us"
  elif [ -f "$dir/cpu.max" ]; then awk '{print $1}' "$dir/cpu.max"
  else echo "?"; fi
}

check_slow_storage() {
  expect_all_ready "slow-storage injected"
  local s; s=$(status_json)
  say "slow-storage: delay path $(echo "$s" | jq -r .delay_path); storage-1 runs $(echo "$s" | jq -c '[.pods[] | select(.name == "storage-1") | .containers[]]')"
  echo "$s" | jq -e '.delay_path == "netem" or .delay_path == "proxy"' >/dev/null || die "no delay path reported"
  # The delay took effect where the ranks read: storage-1 at least 250 ms of the 300, and each sibling at
  # least 200 ms faster (the difference, not the siblings' own figure, which a busy node moves).
  expect_storage1_slow 90 0.25 0.2
}

check_throttled_rank() {
  expect_all_ready "throttled-rank injected"
  wait_status "rank-1 live 150m, spec 150m, template 400m" 60 \
    '.pods[] | select(.name == "rank-1") | .resources | .cpu_live == "150m" and .cpu_spec == "150m" and .cpu_template == "400m"'
  local q; q=$(rank1_quota_us)
  [ "$q" = 15000 ] || die "rank-1's container cgroup quota is $q µs, expected 15000 (150m of a 100 ms period)"
  say "rank-1's cgroup quota is $q µs per 100 ms period (150m)"
}

check_unplaceable_rank() {
  wait_status "rank-4 Pending with the scheduler's Insufficient $GPU_RESOURCE; 4 running ranks Ready; world size 5" 120 \
    ".world_size == 5 and .ranks_desired == 5
     and any(.pods[]; .name == \"rank-4\" and .phase == \"Pending\" and .reason == \"Insufficient $GPU_RESOURCE\"
                      and ((.message // \"\") | test(\"nodes are available: .*Insufficient $GPU_RESOURCE\")))
     and ([.pods[] | select(.role == \"rank\" and .phase == \"Running\" and .ready)] | length) == 4"
  status_json | jq -r '.pods[] | select(.name == "rank-4") | "rank-4: " + .message' >&2
}

have_drills
say "drill slow-storage"; run_drill slow-storage
say "drill throttled-rank"; run_drill throttled-rank
say "drill unplaceable-rank"; run_drill unplaceable-rank

# The same three faults by hand, each checked on the real cluster while it is injected (after making sure
# a failed drill left nothing injected).
lab fault clear --all >&2 || die "clear what the drills left"
lab fault inject slow-storage --server 1 --delay 300ms >&2 || die "inject slow-storage"
check_slow_storage
lab fault clear --all >&2 || die "clear slow-storage"

lab fault inject throttled-rank --rank 1 --cpu 150m >&2 || die "inject throttled-rank"
check_throttled_rank
lab fault clear --all >&2 || die "clear throttled-rank"
wait_status "rank-1 back at 400m" 60 '.pods[] | select(.name == "rank-1") | .resources.cpu_live == "400m"'

lab fault inject unplaceable-rank --ranks 5 >&2 || die "inject unplaceable-rank"
check_unplaceable_rank
lab fault clear --all >&2 || die "clear unplaceable-rank"
wait_status "back to 4 ranks, world size 4" 120 '.world_size == 4 and .ranks_desired == 4'
# The ranks come back one by one (OrderedReady) after the world size is restored.
wait_status "4 ranks Running and Ready again" 180 '([.pods[] | select(.role == "rank" and .phase == "Running" and .ready)] | length) == 4'
expect_all_ready "after clearing every fault"
status_json > "$REPORTS/status-end.json"
finish
