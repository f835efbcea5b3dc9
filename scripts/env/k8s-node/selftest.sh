#!/usr/bin/env bash
# Proves the single-node Kubernetes works for what the lab needs, on a real node: brings it up, runs the
# checks, brings it down and checks that nothing is left. Exit status 0 only when every check passed.
#
#   scripts/env/k8s-node/selftest.sh
#
# Checks: a pod of the lab image runs (weed, lab-proxy) holding 1 GPU with a 400m CPU limit; four GPUs
# can be taken and a fifth pod stays Pending with the scheduler's "Insufficient <gpu>"; an in-place
# resize through pods/resize takes the CPU limit to 150m in the pod status AND in the container's
# cgroup on the host, without a restart; a ClusterIP Service reaches a SeaweedFS master pod from another
# pod (through the Service environment variables, no DNS) and from the host; the API server's Service
# answers from a pod. After down.sh: no process, mount, network namespace, veth, bridge, iptables chain,
# cgroup or state directory of the node is left, and the sysctls are as they were.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

[ "$(id -u)" -eq 0 ] || { echo "selftest.sh runs the node: run it as root" >&2; exit 1; }
if [ -d "$S" ]; then
  echo "a node is already up (or was not taken down) in $S; the self-test brings up and removes its own:" >&2
  echo "run scripts/env/k8s-node/down.sh first" >&2
  exit 1
fi

failures=0
quiet() { "$@" >/dev/null 2>&1; }
check() { # check <description> <command...>
  local what=$1 t
  shift
  t=$(date +%s.%N)
  if "$@"; then ok "$what" "$(elapsed "$t")"; else bad "$what" "$(elapsed "$t")"; failures=$((failures + 1)); fi
}

before=$(mktemp -d "${TMPDIR:-/tmp}/lab-k8s-selftest.XXXXXX")
snapshot() { # snapshot <dir>: what down.sh must give back
  local d=$1 fam t k
  mkdir -p "$d"
  for fam in iptables ip6tables; do
    for t in filter nat mangle raw; do
      "$fam" -w 5 -t "$t" -S 2>/dev/null | awk '$1 == "-N" {print $2}' | sort > "$d/chains.$fam.$t"
    done
    "$fam-save" 2>/dev/null | awk '/^\*/ { print substr($1, 2) }' | sort > "$d/tables.$fam"
  done
  ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort > "$d/links"
  ip netns list 2>/dev/null | sort > "$d/netns"
  for k in "${TOUCHED_SYSCTLS[@]}"; do [ -f "/proc/sys/$k" ] && echo "$k $(cat "/proc/sys/$k")"; done > "$d/sysctls"
  for k in "${SHARED_DIRS[@]}"; do [ -e "$k" ] && echo "$k"; done > "$d/dirs"
  return 0
}
snapshot "$before"

NS=selftest
LAB_IMAGE=""

cleanup() {
  if [ -d "$S" ]; then
    echo "(bringing the node down after a failure)"
    "$K8S_NODE_DIR/down.sh" >/dev/null 2>&1
  fi
  rm -rf "$before"
}
trap cleanup EXIT

# --- up ---------------------------------------------------------------------------------------------
say "== up"
check "up.sh brings the node up" "$K8S_NODE_DIR/up.sh"
if [ ! -f "$S/images.txt" ]; then
  say "selftest: FAIL (the node did not come up)"
  exit 1
fi
LAB_IMAGE=$(awk '$1 ~ /\/lab:/ {print $1}' "$S/images.txt")
check "status.sh says up" quiet "$K8S_NODE_DIR/status.sh"
kc create namespace "$NS" >/dev/null

gpu_pod() { # gpu_pod <name> <command>
  kc -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $LAB_IMAGE
    imagePullPolicy: Never
    command: ["sh", "-c", "$2"]
    resources:
      requests: {cpu: 100m}
      limits: {cpu: 400m, $GPU_RESOURCE: "1"}
EOF
}
phase() { kc -n "$NS" get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
is_running() { [ "$(phase "$1")" = Running ]; }

# --- the lab image runs and holds a GPU ---------------------------------------------------------------
say "== pods of the lab image with $GPU_RESOURCE"
gpu_pod gpu-1 "weed version; lab-proxy --help >/dev/null && echo lab-proxy-ok; tc -V; exec sleep 3600"
check "gpu-1 (lab image, 1 GPU, cpu limit 400m) Running" wait_for 90 is_running gpu-1
logs_ok() {
  local l
  l=$(kc -n "$NS" logs gpu-1 2>/dev/null)
  grep -q '^version ' <<<"$l" && grep -q lab-proxy-ok <<<"$l" && grep -q 'iproute2' <<<"$l"
}
check "gpu-1 ran weed version, lab-proxy --help and iproute2's tc" wait_for 20 logs_ok
say "    $(kc -n "$NS" logs gpu-1 2>/dev/null | grep -m1 '^version ')"
say "    $(kc -n "$NS" logs gpu-1 2>/dev/null | grep -m1 'iproute2')"
for i in 2 3 4; do gpu_pod "gpu-$i" "exec sleep 3600"; done
all_four() { is_running gpu-2 && is_running gpu-3 && is_running gpu-4; }
check "gpu-2..gpu-4 Running (4 of 4 GPUs taken)" wait_for 90 all_four
gpu_pod gpu-5 "exec sleep 3600"
insufficient() {
  kc -n "$NS" get pod gpu-5 -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}' \
    | grep -q "Insufficient $GPU_RESOURCE"
}
check "gpu-5 Pending with 'Insufficient $GPU_RESOURCE'" wait_for 30 insufficient
say "    $(kc -n "$NS" get pod gpu-5 -o jsonpath='{.status.phase}: {.status.conditions[?(@.type=="PodScheduled")].message}')"
check "gpu-5 still Pending" test "$(phase gpu-5)" = Pending

# --- in-place resize ------------------------------------------------------------------------------------
say "== in-place resize of gpu-1's CPU limit (pods/resize)"
container_cgroup() {
  local cid
  cid=$(kc -n "$NS" get pod gpu-1 -o jsonpath='{.status.containerStatuses[0].containerID}')
  cid=${cid#containerd://}
  if [ "$(cat "$S/cgroup-version")" = 2 ]; then
    find "/sys/fs/cgroup/$CGROUP_NAME" -type d -name "*$cid*" | head -n 1
  else
    find "/sys/fs/cgroup/cpu/$CGROUP_NAME" -type d -name "$cid" | head -n 1
  fi
}
quota() { # the CPU quota in µs per 100 ms period, from cgroup v1 or v2
  local d=$1
  if [ -f "$d/cpu.max" ]; then awk '{print $1}' "$d/cpu.max"; else cat "$d/cpu.cfs_quota_us"; fi
}
CG=$(container_cgroup)
check "gpu-1's container cgroup found on the host ($CG)" test -n "$CG" -a -d "$CG"
check "cgroup quota before the resize is 40000 (400m)" test "$(quota "$CG")" = 40000
restarts_before=$(kc -n "$NS" get pod gpu-1 -o jsonpath='{.status.containerStatuses[0].restartCount}')
check "kubectl patch --subresource resize accepted" \
  kc -n "$NS" patch pod gpu-1 --subresource resize \
  -p '{"spec":{"containers":[{"name":"main","resources":{"limits":{"cpu":"150m"}}}]}}' -o name
status_limit() { [ "$(kc -n "$NS" get pod gpu-1 -o jsonpath='{.status.containerStatuses[0].resources.limits.cpu}')" = 150m ]; }
check "pod status resources show limits.cpu 150m" wait_for 30 status_limit
quota_is() { [ "$(quota "$CG")" = "$1" ]; }
check "container cgroup quota on the host is 15000 (150m)" wait_for 15 quota_is 15000
say "    $CG: quota $(quota "$CG")"
check "container was not restarted" \
  test "$(kc -n "$NS" get pod gpu-1 -o jsonpath='{.status.containerStatuses[0].restartCount}')" = "$restarts_before"
check "spec.containers[0].resources.limits.cpu is 150m" \
  test "$(kc -n "$NS" get pod gpu-1 -o jsonpath='{.spec.containers[0].resources.limits.cpu}')" = 150m

# --- ClusterIP Services ---------------------------------------------------------------------------------
say "== ClusterIP Service (kube-proxy, no DNS)"
kc -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: seaweed-master
spec:
  selector: {app: seaweed-master}
  ports: [{name: http, port: 9333, targetPort: 9333}]
---
apiVersion: v1
kind: Pod
metadata:
  name: seaweed-master
  labels: {app: seaweed-master}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: master
    image: $LAB_IMAGE
    imagePullPolicy: Never
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    command: ["sh", "-c", "exec weed master -ip=\$POD_IP -ip.bind=0.0.0.0 -port=9333 -mdir=/data"]
    resources: {limits: {cpu: 300m}}
    readinessProbe:
      httpGet: {path: /cluster/status, port: 9333}
      periodSeconds: 1
EOF
check "SeaweedFS master pod Ready" quiet kc -n "$NS" wait --for=condition=Ready pod/seaweed-master --timeout=90s
SVC_IP=$(kc -n "$NS" get service seaweed-master -o jsonpath='{.spec.clusterIP}')
host_reach() { curl -fsS --max-time 3 "http://$SVC_IP:9333/cluster/status" | grep -q '"IsLeader":true'; }
check "host reaches the master through ClusterIP $SVC_IP" wait_for 30 host_reach
kc -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: $LAB_IMAGE
    imagePullPolicy: Never
    command:
    - sh
    - -c
    - |
      echo "service env: \$SEAWEED_MASTER_SERVICE_HOST:\$SEAWEED_MASTER_SERVICE_PORT"
      timeout 10 wget -q -O - "http://\$SEAWEED_MASTER_SERVICE_HOST:\$SEAWEED_MASTER_SERVICE_PORT/cluster/status" || exit 1
      echo
      timeout 5 nc "\$KUBERNETES_SERVICE_HOST" "\$KUBERNETES_SERVICE_PORT" </dev/null && echo apiserver-service-reachable
EOF
client_done() { local p; p=$(phase client); [ "$p" = Succeeded ] || [ "$p" = Failed ]; }
wait_for 60 client_done
client_log=$(kc -n "$NS" logs client 2>/dev/null)
say "$(sed 's/^/    /' <<<"$client_log")"
check "a pod reaches the master through the Service env vars (ClusterIP)" grep -q '"IsLeader":true' <<<"$client_log"
check "a pod reaches the API server's Service (kubernetes.default)" grep -q apiserver-service-reachable <<<"$client_log"
check "client pod Succeeded" test "$(phase client)" = Succeeded

# --- down, and nothing left ----------------------------------------------------------------------------
say "== down"
# Everything that runs for the node now, to check afterwards that each one is gone.
pids=""
for f in "$PIDS"/*.pid; do pids+=" $(awk '{print $1}' "$f")"; done
for d in $(cgroup_dirs); do pids+=" $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"; done
for p in /proc/[0-9]*; do
  { tr '\0' '\n' < "$p/cmdline" | grep -qxF "$SOCK"; } 2>/dev/null && pids+=" ${p#/proc/}"
done
pids=$(echo "$pids" | xargs -n1 | sort -un | xargs)
say "    $(echo "$pids" | wc -w) processes of the node before down"
state_dir=$S
check "down.sh exits 0" "$K8S_NODE_DIR/down.sh"
alive=""
for p in $pids; do [ -d "/proc/$p" ] && alive+=" $p($( { tr '\0' ' ' < "/proc/$p/cmdline"; } 2>/dev/null | cut -c1-40))"; done
check "no process of the node left" test -z "$alive"
[ -z "$alive" ] || say "    still alive:$alive"
check "no mount under the state directory" test -z "$(awk -v s="$state_dir" 'index($5, s) == 1' /proc/self/mountinfo)"
check "no nsfs mount of a pod left" test -z "$(awk -v s="$state_dir" '$9 == "nsfs" && index($5, s) == 1' /proc/self/mountinfo)"
check "state directory removed" test ! -e "$state_dir"
after=$(mktemp -d "${TMPDIR:-/tmp}/lab-k8s-selftest.XXXXXX")
snapshot "$after"
same() { # same <file>: before and after agree
  if diff -u "$before/$1" "$after/$1" >/dev/null; then return 0; fi
  diff -u "$before/$1" "$after/$1" | sed 's/^/    /' | tail -n +3
  return 1
}
chains_same() { local f ok=0; for f in "$before"/chains.* "$before"/tables.*; do same "$(basename "$f")" || ok=1; done; return $ok; }
check "iptables chains and tables as before (no KUBE-*/CNI-* left)" chains_same
check "network links as before (no $BRIDGE, no veth)" same links
check "network namespaces as before" same netns
check "sysctls as before" same sysctls
check "shared host directories as before" same dirs
cg_left=""
for d in $(cgroup_dirs); do [ -e "$d" ] && cg_left+=" $d"; done
check "pod cgroups removed" test -z "$cg_left"
rm -rf "$after"

if [ "$failures" -eq 0 ]; then
  say "selftest: PASS ($(elapsed "$T0"))"
  exit 0
fi
say "selftest: FAIL ($failures checks failed, $(elapsed "$T0"))"
exit 1
