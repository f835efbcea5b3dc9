# shellcheck shell=bash disable=SC2034  # the variables are used by the scripts that source this file
# Shared by engine.sh, node-image.sh and selftest.sh: versions, where the private Docker engine and the
# caches live, and the step/process helpers (the same conventions as scripts/env/k8s-node/lib.sh). Sourced.
#
# Parameters (environment):
#   LAB_CACHE           build cache (default ~/.cache/straggler-lab)
#   LAB_DOCKER_RUN      the engine's runtime folder: socket, PID files, exec root (default
#                       /run/straggler-lab-docker; root-only)
#   LAB_DOCKER_STATE    the engine's logs and the record of the host before up (default
#                       ~/.local/state/straggler-lab-docker)

KIND_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_ROOT=$(cd "$KIND_DIR/../../.." && pwd)

KIND_VERSION=v0.30.0
K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
COREDNS_VERSION=v1.12.1
CACHE=${LAB_CACHE:-$HOME/.cache/straggler-lab}
NODE_IMAGE=straggler-lab/kind-node:$K8S_VERSION
NODE_CACHE="$CACHE/kind-node-$K8S_VERSION-kind-$KIND_VERSION"

# --- the private engine ---------------------------------------------------------------------------
RUN_DIR=${LAB_DOCKER_RUN:-/run/straggler-lab-docker}
ENGINE_STATE=${LAB_DOCKER_STATE:-$HOME/.local/state/straggler-lab-docker}
DOCKER_SOCK="$RUN_DIR/docker.sock"
CONTAINERD_SOCK="$RUN_DIR/containerd/containerd.sock"
PIDS="$ENGINE_STATE/pids"
LOGS="$ENGINE_STATE/logs"
HOST="$ENGINE_STATE/host-before"
# Networks on documentation ranges only: docker0 takes the first /28 of the pool, every network Docker
# creates later (kind's own, when it makes it) takes a further /28 of 198.51.100.0/25. The upper half,
# 198.51.100.128/25, is left to the clusters' Service range. The `kind` network is created by `up` with
# a fixed subnet so that the node addresses are known in advance.
DOCKER_BIP=198.51.100.1/28
DOCKER_POOL=198.51.100.0/25
DOCKER_POOL_SIZE=28
KIND_NETWORK=kind
KIND_SUBNET=198.51.100.16/28
KIND_GATEWAY=198.51.100.17
SUBNET_PREFIX=198.51.100.

# Host-wide sysctls something in the engine or the kind nodes may change: Docker's bridge driver
# (bridge-nf-call-*), and the kubelets inside privileged node containers, which see /proc/sys writable
# and set their kernel defaults (kernel.panic, vm.overcommit_memory ...) on the host kernel. Saved before
# the first up, restored by down.
TOUCHED_SYSCTLS=(
  net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables
  net/bridge/bridge-nf-call-arptables
  vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/netfilter/nf_conntrack_max
)

docker_() { DOCKER_HOST="unix://$DOCKER_SOCK" docker "$@"; }

# --- output, steps, waits and processes: shared with k8s-node/lib.sh ------------------------------
# shellcheck source=scripts/env/lib.sh
. "$KIND_DIR/../lib.sh"

# engine_up: the recorded dockerd is alive and answers on the private socket.
engine_up() { running dockerd && docker_ version >/dev/null 2>&1; }

# The capability bounding set of this process lacks a capability the kernel knows (a VM that withholds
# CAP_SYS_RESOURCE, say): privileged containers then need the runc wrapper (runc-capfilter).
caps_missing() {
  local bnd last
  bnd=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)
  last=$(cat /proc/sys/kernel/cap_last_cap)
  [ $(( 16#$bnd )) -ne $(( (1 << (last + 1)) - 1 )) ]
}
