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

# --- output ---------------------------------------------------------------------------------------
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1fs", b - a }'; }
ok() { printf '  \033[32m✓\033[0m %s (%s)\n' "$1" "$2"; }
bad() { printf '  \033[31m✗\033[0m %s (%s)\n' "$1" "$2" >&2; }
say() { printf '%s\n' "$*"; }

# step <description> <command...>: runs the command, prints ✓ or ✗ with its duration, and fails on
# failure. The command runs in a subshell with errexit really in force (inside `if cmd` bash would
# ignore `set -e` in every function cmd calls). STEP_ERREXIT=0 runs steps best-effort.
step() {
  local what=$1 t rc=0
  shift
  t=$(date +%s.%N)
  if [ "${STEP_ERREXIT:-1}" = 1 ]; then ( set -e; "$@" ) & else ( "$@" ) & fi
  wait $! || rc=$?
  if [ "$rc" -eq 0 ]; then
    ok "$what" "$(elapsed "$t")"
  else
    bad "$what" "$(elapsed "$t")"
    return 1
  fi
}

# wait_for <seconds> <command...>: polls the command every 0.5s until it succeeds or the deadline passes.
wait_for() {
  local deadline=$(( $(date +%s) + $1 ))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

# --- processes ------------------------------------------------------------------------------------
# A PID file holds "<pid> <start time in clock ticks>", so a PID reused by an unrelated process after a
# crash or reboot is never mistaken for ours.
proc_start_time() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }
proc_state() { awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null; }

running() {
  local f="$PIDS/$1.pid" pid start
  [ -f "$f" ] || return 1
  read -r pid start < "$f" || return 1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(proc_start_time "$pid")" = "$start" ] \
    && [ "$(proc_state "$pid")" != Z ]
}

recorded_pid() { awk '{print $1}' "$PIDS/$1.pid" 2>/dev/null; }

# start_proc <name> <command...>: starts the command in its own session, logs to $LOGS/<name>.log,
# records its PID.
start_proc() {
  local name=$1 pid
  shift
  mkdir -p "$PIDS" "$LOGS"
  if running "$name"; then return 0; fi
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  pid=$!
  sleep 0.2
  if [ ! -d "/proc/$pid" ]; then
    echo "$name exited at once; last lines of $LOGS/$name.log:" >&2
    tail -n 20 "$LOGS/$name.log" >&2
    return 1
  fi
  echo "$pid $(proc_start_time "$pid")" > "$PIDS/$name.pid"
}

# stop_pid <pid> <seconds>: SIGTERM, wait, then SIGKILL.
stop_pid() {
  local pid=$1 grace=${2:-10} deadline
  [ -d "/proc/$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  deadline=$(( $(date +%s) + grace ))
  while [ -d "/proc/$pid" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    [ "$(proc_state "$pid")" = Z ] && return 0
    sleep 0.2
  done
  [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 1 25); do [ -d "/proc/$pid" ] || return 0; sleep 0.2; done
  return 0
}

stop_proc() {
  local name=$1 grace=${2:-10}
  if running "$name"; then stop_pid "$(recorded_pid "$name")" "$grace"; fi
  rm -f "$PIDS/$name.pid"
}

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
