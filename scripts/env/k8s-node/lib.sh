# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this file
# Shared by up.sh, down.sh, status.sh and selftest.sh: the node's parameters, where its state lives, and
# the helpers that start, find and stop its processes by recorded PID. Sourced, not run.
#
# Parameters (environment):
#   LAB_K8S_STATE         state directory (default ~/.local/state/straggler-lab-k8s); down.sh removes it
#   LAB_CACHE             build cache (default ~/.cache/straggler-lab)
#   LAB_K8S_NODE_NAME     node name (default lab-node)
#   LAB_K8S_NODE_IP       address the API server and kubelet listen on (default: this host's address on
#                         its default route; pods reach the API server through it)
#   LAB_K8S_GPU_RESOURCE  extended resource advertised on the node (default lab.dev/gpu)
#   LAB_K8S_GPU_COUNT     how many (default 4)
#   LAB_K8S_SERVICE_CIDR  Service ClusterIP range (default 10.96.0.0/16)
#   LAB_K8S_POD_CIDR      pod addresses on the node's bridge (default 10.244.0.0/24)
#   LAB_K8S_BRIDGE        the CNI bridge (default lab-cni0)
#   LAB_K8S_CGROUP        the cgroup (in every v1 hierarchy, or in the v2 tree) all pods live under
#                         (default straggler-lab-k8s)

K8S_NODE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_ROOT=$(cd "$K8S_NODE_DIR/../../.." && pwd)

S=${LAB_K8S_STATE:-$HOME/.local/state/straggler-lab-k8s}
CACHE=${LAB_CACHE:-$HOME/.cache/straggler-lab}
NODE=${LAB_K8S_NODE_NAME:-lab-node}
GPU_RESOURCE=${LAB_K8S_GPU_RESOURCE:-lab.dev/gpu}
GPU_COUNT=${LAB_K8S_GPU_COUNT:-4}
SERVICE_CIDR=${LAB_K8S_SERVICE_CIDR:-10.96.0.0/16}
POD_CIDR=${LAB_K8S_POD_CIDR:-10.244.0.0/24}
BRIDGE=${LAB_K8S_BRIDGE:-lab-cni0}
CGROUP_NAME=${LAB_K8S_CGROUP:-straggler-lab-k8s}
CNI_NETWORK=straggler-lab

PKI="$S/pki"
LOGS="$S/logs"
PIDS="$S/pids"
HOST="$S/host-before"           # what the host looked like before the first up, for down to restore
SOCK="$S/containerd/containerd.sock"
KUBECONFIG_ADMIN="$S/admin.kubeconfig"
CNI_BIN=/usr/lib/cni

# Every sysctl a component of the node may change (the kubelet's kernel defaults, the bridge plugin's
# forwarding, kube-proxy's conntrack and localnet settings): saved before the first up, restored by down.
TOUCHED_SYSCTLS=(
  net/ipv4/ip_forward net/ipv6/conf/all/forwarding net/ipv4/conf/all/route_localnet
  net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables
  vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes
  net/netfilter/nf_conntrack_max net/netfilter/nf_conntrack_tcp_timeout_established
  net/netfilter/nf_conntrack_tcp_timeout_close_wait net/netfilter/nf_conntrack_tcp_be_liberal
)

# Host paths some component creates outside the state directory whatever it is configured with.
# (The kubelet's device-plugin socket directory is a constant, whatever --root-dir says; mount(8) keeps
# its lock in /run/mount.)
SHARED_DIRS=(/var/log/containers /var/lib/cni /var/lib/cni/results /run/containerd /run/containerd/s
             /var/lib/kubelet /var/lib/kubelet/device-plugins /run/mount)

# --- output, steps, waits and processes: shared with kind/lib.sh -------------------------------
T0=$(date +%s.%N)
# shellcheck source=scripts/env/lib.sh
. "$K8S_NODE_DIR/../lib.sh"

# wait_up <name> <seconds> <command...>: like wait_for, but gives up at once (showing the end of its
# log) when the process <name> has exited, instead of waiting out the deadline.
wait_up() {
  local name=$1 deadline=$(( $(date +%s) + $2 ))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ! running "$name"; then
      echo "$name exited; last lines of $LOGS/$name.log:" >&2
      tail -n 15 "$LOGS/$name.log" >&2
      return 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$name not ready after the deadline; see $LOGS/$name.log" >&2
      return 1
    fi
    sleep 0.5
  done
}

# --- tools --------------------------------------------------------------------------------------
node_ip_default() {
  ip -4 route get 1.1.1.1 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit } }'
}
NODE_IP=${LAB_K8S_NODE_IP:-$( [ -f "$S/node-ip" ] && cat "$S/node-ip" || node_ip_default )}
NODE_IP=${NODE_IP:-127.0.0.1}

k8s_bin_dir() { "$K8S_NODE_DIR/build.sh" 2>/dev/null; }

kubectl_bin() {
  if [ -x "$LAB_ROOT/.tools/bin/kubectl" ]; then echo "$LAB_ROOT/.tools/bin/kubectl"; return; fi
  "$LAB_ROOT/scripts/tools.sh" kubectl >/dev/null && echo "$LAB_ROOT/.tools/bin/kubectl"
}

kc() { "$(kubectl_bin)" --kubeconfig "$KUBECONFIG_ADMIN" --cache-dir "$S/kube-cache" --request-timeout=10s "$@"; }

ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# cgroup_dirs: our cgroup in every hierarchy this host has (v1: one per controller; v2: one).
cgroup_dirs() {
  local m
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    echo "/sys/fs/cgroup/$CGROUP_NAME"
    return
  fi
  for m in /sys/fs/cgroup/*; do
    [ -d "$m" ] && [ ! -L "$m" ] || continue
    # Includes the hybrid layout's controller-less cgroup2 mount, where runc may also place containers.
    mountpoint -q "$m" && echo "$m/$CGROUP_NAME"
  done
}
