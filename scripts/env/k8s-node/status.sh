#!/usr/bin/env bash
# Says whether the single-node Kubernetes of up.sh is up: which of its processes run, whether the node
# is Ready, and the GPUs it advertises.
#
#   scripts/env/k8s-node/status.sh      exit status 0 when every process runs and the node is Ready, 1 otherwise
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ ! -d "$S" ]; then
  say "node is down (no state in $S)"
  exit 1
fi
up=0
say "state: $S"
for name in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
  if running "$name"; then
    ok "$name pid $(recorded_pid "$name")" "log $LOGS/$name.log"
  else
    bad "$name not running" "log $LOGS/$name.log"
    up=1
  fi
done
if running kube-apiserver; then
  ready=$(kc get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)
  key=${GPU_RESOURCE//./\\.}
  cap=$(kc get node "$NODE" -o jsonpath="{.status.capacity['$key']}" 2>/dev/null)
  alloc=$(kc get node "$NODE" -o jsonpath="{.status.allocatable['$key']}" 2>/dev/null)
  version=$(kc get node "$NODE" -o jsonpath='{.status.nodeInfo.kubeletVersion}' 2>/dev/null)
  if [ "$ready" = True ]; then ok "node $NODE Ready" "kubelet ${version:-?}"; else bad "node $NODE not Ready" "${ready:-no node}"; up=1; fi
  say "  $GPU_RESOURCE: capacity ${cap:-none}, allocatable ${alloc:-none}"
  say "  pods: $(kc get pods -A --no-headers 2>/dev/null | wc -l)"
else
  up=1
fi
say "kubeconfig: $KUBECONFIG_ADMIN"
if [ "$up" -eq 0 ]; then say "node is up"; else say "node is not (fully) up"; fi
exit "$up"
