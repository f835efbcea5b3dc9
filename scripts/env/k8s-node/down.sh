#!/usr/bin/env bash
# Stops the single-node Kubernetes that up.sh started and removes everything it created: its
# processes (by recorded PID, plus the containerd shims and the containers they run, found through the
# node's own socket and cgroup), the mounts under its state directory, the pods' network namespaces
# and veths, the CNI bridge, the iptables chains kube-proxy, the kubelet and the CNI plugins made, the
# sysctls they changed (restored), and finally the state directory. It touches nothing it did not
# create: host chains, links and directories that existed before the first up are left alone.
#
#   scripts/env/k8s-node/down.sh        exit status 0 when everything is gone, 1 if something remained
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export STEP_ERREXIT=0
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

[ "$(id -u)" -eq 0 ] || { echo "down.sh must run as root, like up.sh" >&2; exit 1; }
if [ ! -d "$S" ]; then
  say "k8s-node down: nothing to do ($S does not exist)"
  exit 0
fi
say "k8s-node down: state in $S"
failed=0

# --- workloads first, through Kubernetes, so the kubelet and CNI tear down what they set up -----------
stop_controllers() {
  # Nothing may recreate or reschedule the pods being deleted.
  stop_proc kube-scheduler 10
  stop_proc kube-controller-manager 10
}

delete_pods() {
  running kube-apiserver && running kubelet || return 0
  [ -n "$(kc get pods -A -o name 2>/dev/null)" ] || return 0
  kc delete pods --all -A --grace-period=3 --wait=false >/dev/null 2>&1
  if ! wait_for 60 no_pods_or_no_kubelet || ! running kubelet; then
    echo "pods not torn down by the kubelet; the leftover-container steps below remove them" >&2
    kc delete pods --all -A --grace-period=0 --force >/dev/null 2>&1
  fi
  # The kubelet has stopped the containers and torn down sandboxes once the API objects are gone.
  return 0
}
no_pods_or_no_kubelet() { ! running kubelet || [ -z "$(kc get pods -A -o name 2>/dev/null)" ]; }

stop_kube_proxy() {
  stop_proc kube-proxy 10
}

stop_kubelet() {
  stop_proc kubelet 15
}

# --- containers left behind (the kubelet died, or down.sh runs after a failed up) ----------------
remove_containers() {
  running containerd || return 0
  local id
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1; done
  for _ in $(seq 1 20); do
    [ -z "$(ctr_ tasks ls 2>/dev/null | awk 'NR > 1 && $3 == "RUNNING"')" ] && break
    sleep 0.5
  done
  # Deleting a task lets its shim unmount the rootfs and exit cleanly.
  for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1; done
  for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$id" >/dev/null 2>&1; done
  return 0
}

stop_containerd() {
  stop_proc containerd 15
}

# Shims and container processes can outlive containerd: they are ours when their command line names
# this node's containerd socket, or when they sit in this node's cgroup.
kill_leftovers() {
  local pid f p
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ -r "$p/cmdline" ] || continue
    if { tr '\0' '\n' < "/proc/$pid/cmdline" | grep -qxF "$SOCK"; } 2>/dev/null; then
      echo "    shim $pid ($( { tr '\0' ' ' < "/proc/$pid/cmdline"; } 2>/dev/null | cut -c1-60)...)"
      stop_pid "$pid" 5
    fi
  done
  for _ in $(seq 1 20); do
    local pids=""
    for d in $(cgroup_dirs); do
      [ -d "$d" ] || continue
      pids+=" $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
    done
    pids=$(echo "$pids" | xargs -n1 2>/dev/null | sort -u | xargs 2>/dev/null)
    [ -n "$pids" ] || break
    echo "    processes left in /$CGROUP_NAME: $pids"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 0.5
  done
  # Shim sockets live in containerd's fixed /run/containerd/s, named by a hash of this node's socket
  # path, the namespace and the shim id; a shim that was killed leaves its socket behind.
  local task_root="$S/containerd/state/io.containerd.runtime.v2.task" ns id sock
  for f in "$task_root"/*/*; do
    [ -d "$f" ] || continue
    ns=$(basename "$(dirname "$f")"); id=$(basename "$f")
    sock="/run/containerd/s/$(printf '%s' "$SOCK/$ns/$id" | sha256sum | awk '{print $1}')"
    [ -S "$sock" ] && rm -f "$sock"
  done
  return 0
}

# --- mounts, cgroups, network -----------------------------------------------------------------------
our_mounts() {
  # mountinfo field 5 is the mount point, with spaces escaped as \040.
  awk -v s="$S" 'index($5, s "/") == 1 || $5 == s {print $5}' /proc/self/mountinfo | awk '{ print length, $0 }' \
    | sort -rn | cut -d' ' -f2-
}

unmount_all() {
  local m
  for _ in 1 2 3; do
    [ -n "$(our_mounts)" ] || return 0
    while read -r m; do
      [ -n "$m" ] || continue
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(our_mounts)
  done
  if [ -n "$(our_mounts)" ]; then
    echo "still mounted:" >&2
    our_mounts >&2
    return 1
  fi
}

remove_cgroups() {
  local d left=0
  for d in $(cgroup_dirs); do
    [ -d "$d" ] || continue
    # Leaves first: a v1 cgroup can only be removed once it has no children and no tasks.
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$d" ] && { echo "cgroup $d remains" >&2; left=1; }
  done
  return "$left"
}

remove_network() {
  local l
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    if grep -qx "$BRIDGE" "$HOST/links" 2>/dev/null; then
      echo "$BRIDGE existed before the node: left alone" >&2
    else
      for l in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'); do
        ip link del "$l" 2>/dev/null || true
      done
      ip link del "$BRIDGE" || return 1
    fi
  fi
  if [ -f "$HOST/saved" ]; then
    python3 "$K8S_NODE_DIR/iptables-sweep.py" "$HOST" | sed 's/^/    /'
  else
    # up.sh stopped before it recorded the host: kube-proxy never ran, nothing of ours can be told apart.
    echo "    no record of the host's chains: iptables left alone"
  fi
}

restore_sysctls() {
  local k v
  [ -f "$HOST/sysctls" ] || return 0
  while read -r k v; do
    [ -f "/proc/sys/$k" ] || continue
    [ "$(cat "/proc/sys/$k")" = "$v" ] && continue
    echo "    $k: $(cat "/proc/sys/$k") -> $v"
    echo "$v" > "/proc/sys/$k" || return 1
  done < "$HOST/sysctls"
}

sandbox_ids() {
  local d
  for d in "$S"/containerd/state/io.containerd.grpc.v1.cri/sandboxes/* "$S"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/* \
           "$S"/containerd/state/io.containerd.runtime.v2.task/k8s.io/*; do
    [ -d "$d" ] && basename "$d"
  done | sort -u
}

# Directories some component creates at a fixed host path: our entries in them go, and the directory
# itself goes if it did not exist before the node and is now empty.
clean_shared_dirs() {
  local l d
  for l in /var/log/containers/*; do
    [ -L "$l" ] || continue
    case "$(readlink "$l")" in "$S"/*) rm -f "$l" ;; esac
  done
  # CNI result caches: containerd's network and its loopback network, per sandbox. They stay behind
  # when a sandbox was removed without a CNI DEL (the kubelet had died).
  rm -f /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null
  for id in $(sandbox_ids); do rm -f /var/lib/cni/results/cni-loopback-"$id"-lo; done
  if ! grep -qx /var/lib/kubelet/device-plugins "$HOST/dirs" 2>/dev/null; then
    rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  fi
  for d in $(printf '%s\n' "${SHARED_DIRS[@]}" | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-); do
    [ -d "$d" ] || continue
    grep -qx "$d" "$HOST/dirs" 2>/dev/null && continue
    rmdir "$d" 2>/dev/null || echo "    $d is not empty (something else uses it): left in place"
  done
  return 0
}

stop_control_plane() {
  stop_proc kube-apiserver 15
  stop_proc etcd 15
}

remove_state() {
  if [ -n "$(our_mounts)" ]; then
    echo "mounts remain under $S: not removing it" >&2
    return 1
  fi
  local p
  for p in "$PIDS"/*.pid; do
    [ -f "$p" ] || continue
    if running "$(basename "$p" .pid)"; then echo "$(basename "$p" .pid) still runs" >&2; return 1; fi
  done
  local parents
  parents=$(cat "$S/created-parents" 2>/dev/null || true)
  rm -rf --one-file-system "$S" || return 1
  for p in $parents; do rmdir "$p" 2>/dev/null || true; done
}

step "scheduler and controller-manager stopped" stop_controllers || failed=1
step "pods deleted through the API (the kubelet tears them down)" delete_pods || failed=1
step "kube-proxy stopped" stop_kube_proxy || failed=1
step "kubelet stopped" stop_kubelet || failed=1
step "leftover containers removed" remove_containers || failed=1
step "containerd stopped" stop_containerd || failed=1
step "no shim or container process left" kill_leftovers || failed=1
step "kube-apiserver and etcd stopped" stop_control_plane || failed=1
step "mounts under the state directory removed" unmount_all || failed=1
step "pod cgroups removed" remove_cgroups || failed=1
step "bridge, veths and iptables chains removed" remove_network || failed=1
step "sysctls restored" restore_sysctls || failed=1
step "shared host directories cleaned" clean_shared_dirs || failed=1
step "state directory removed" remove_state || failed=1
if [ "$failed" -eq 0 ]; then
  say "node is down ($(elapsed "$T0"))"
else
  say "node is down, but something remained (see ✗ above)"
fi
exit "$failed"
