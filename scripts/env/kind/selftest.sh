#!/usr/bin/env bash
# End-to-end check of the offline kind infrastructure on this machine:
#
#   private engine up → node image (build or reuse) → a 1-node cluster: node Ready, CoreDNS Ready, an OCI
#   image loaded with `kind load image-archive`, a pod Running with an IP, DNS, a Service → the same with
#   2 nodes (a pod on the worker reaches a pod on the control-plane) → clusters deleted → kind's network
#   deleted → engine down → nothing left (containers, bridges, firewall rules, mounts, processes).
#
#   scripts/env/kind/selftest.sh          (LAB_KIND_KEEP=1 leaves the engine and the last cluster up)
#
# An engine that was already running when the selftest started is someone's: the selftest then removes
# only its own cluster and leaves the engine up (and cannot check that nothing is left).
#
# Prints ✓/✗ per check with its time; exits non-zero on the first failure (after cleaning up).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NAME=lab-selftest
PROBE_REF=straggler-lab/kind-probe:1
PROBE_ARCHIVE="$CACHE/kind-probe/probe.oci.tar"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lab-kind-selftest.XXXXXX")
KCFG="$WORK/kubeconfig"
T_ALL=$(date +%s.%N)

eval "$("$KIND_DIR/tools.sh")"
export DOCKER_HOST="unix://$DOCKER_SOCK"

kc() { "$KUBECTL" --kubeconfig "$KCFG" --request-timeout=20s "$@"; }

cleanup() {
  local rc=$?
  if [ "${LAB_KIND_KEEP:-0}" = 1 ]; then
    say "LAB_KIND_KEEP=1: engine and cluster left up (kind delete cluster --name $NAME; $KIND_DIR/engine.sh down)"
  elif [ "$rc" != 0 ]; then
    say "failed: cleaning up"
    kind delete cluster --name "$NAME" >/dev/null 2>&1 || true
    if [ "$ENGINE_WAS_UP" = 0 ]; then "$KIND_DIR/engine.sh" down || true; fi
  fi
  rm -rf "$WORK"
  say "selftest $( [ "$rc" = 0 ] && echo passed || echo FAILED ) in $(elapsed "$T_ALL")"
}
trap cleanup EXIT

# --- the probe image: busybox (sh, httpd, wget, nslookup) as an OCI archive -----------------------
probe_image() {
  local bb spec lib
  bb=$(command -v busybox || true)
  if [ -z "$bb" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends busybox >/dev/null 2>&1
    bb=$(command -v busybox)
  fi
  spec="$WORK/probe.spec"
  echo "file bin/busybox $bb 0755" > "$spec"
  while read -r lib; do [ -n "$lib" ] && echo "file $lib $lib 0755" >> "$spec"; done \
    < <(ldd "$bb" | awk '/=> \// {print $3} /^\t\// {print $1}')
  for a in sh httpd wget nslookup sleep cat echo ip hostname timeout; do echo "symlink bin/$a busybox" >> "$spec"; done
  echo "dir tmp 1777" >> "$spec"
  printf 'lab-probe ok\n' > "$WORK/index.html"
  echo "file www/index.html $WORK/index.html 0644" >> "$spec"
  mkdir -p "${PROBE_ARCHIVE%/*}"
  python3 "$LAB_ROOT/scripts/env/kind/oci-image.py" --spec "$spec" --name "$PROBE_REF" --out "$PROBE_ARCHIVE" \
    --cmd '["sleep","3600"]' >/dev/null
}

k8s_tools() {
  local dir
  dir=$("$LAB_ROOT/scripts/env/k8s-node/build.sh" 2>/dev/null)
  echo "$dir/kubectl" > "$WORK/kubectl"
}

# --- checks ---------------------------------------------------------------------------------------
create() { # create <config>
  if ! kind create cluster --name "$NAME" --image "$NODE_IMAGE" --config "$1" --wait 180s \
      --kubeconfig "$KCFG" > "$WORK/create.log" 2>&1; then
    tail -n 30 "$WORK/create.log" >&2
    kind export logs "$WORK/kind-logs" --name "$NAME" >/dev/null 2>&1 && echo "logs: $WORK/kind-logs (kept)" >&2
    return 1
  fi
}

nodes_ready() { kc wait node --all --for=condition=Ready --timeout=120s >/dev/null; }

coredns_ready() { kc -n kube-system rollout status deploy/coredns --timeout=150s >/dev/null; }

load_probe() { kind load image-archive "$PROBE_ARCHIVE" --name "$NAME" >/dev/null; }

# pods <web-node> <client-node>: a web server and a client, each pinned to a node, and a Service.
pods() {
  kc apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: { name: web, labels: { app: web } }
spec:
  nodeName: $1
  containers:
  - name: web
    image: $PROBE_REF
    imagePullPolicy: Never
    command: ["httpd", "-f", "-p", "8080", "-h", "/www"]
    ports: [{ containerPort: 8080 }]
---
apiVersion: v1
kind: Pod
metadata: { name: client }
spec:
  nodeName: $2
  containers:
  - name: client
    image: $PROBE_REF
    imagePullPolicy: Never
---
apiVersion: v1
kind: Service
metadata: { name: web }
spec:
  selector: { app: web }
  ports: [{ port: 80, targetPort: 8080 }]
YAML
  kc wait pod web client --for=condition=Ready --timeout=90s >/dev/null
  [ -n "$(kc get pod web -o jsonpath='{.status.podIP}')" ]
  [ -n "$(kc get pod client -o jsonpath='{.status.podIP}')" ]
}

dns() { grep -q 'Address.*198\.51\.100\.129' <<<"$(kc exec client -- nslookup kubernetes.default.svc.cluster.local)"; }

# busybox's own wget -T crashes (SIGSEGV): its timeout applet bounds the request instead.
service() { [ "$(kc exec client -- timeout 5 wget -q -O - http://web.default.svc.cluster.local/)" = "lab-probe ok" ]; }

pod_to_pod() {
  local ip
  ip=$(kc get pod web -o jsonpath='{.status.podIP}')
  [ "$(kc exec client -- timeout 5 wget -q -O - "http://$ip:8080/")" = "lab-probe ok" ]
}

quiet_rm_network() { docker_ network rm "$KIND_NETWORK" >/dev/null; }

delete_cluster() { kind delete cluster --name "$NAME" --kubeconfig "$KCFG" >/dev/null 2>&1; }

# The kubelets run in privileged containers and see /proc/sys writable: do they change the host's
# kernel-wide settings? Reported against the engine's record of the host before `up` (engine.sh down
# restores them either way).
report_sysctls() {
  local s v now changed=""
  [ -f "$HOST/sysctls" ] || return 0
  while read -r s v; do
    now=$(tr '\t' ' ' < "/proc/sys/$s" 2>/dev/null) || continue
    [ "$now" = "$v" ] || changed+="${s//\//.} $v -> $now; "
  done < "$HOST/sysctls"
  if [ -n "$changed" ]; then say "    host sysctls changed since the engine started: $changed(engine.sh down restores them)"
  else say "    host sysctls unchanged since the engine started"; fi
}

nothing_left() {
  local left=0 l
  l=$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E '^(docker0|br-[0-9a-f]{12}|veth)' || true)
  [ -z "$l" ] || { echo "links left: $l" >&2; left=1; }
  l=$(awk -v a="$RUN_DIR" -v b="$CACHE/docker-" 'index($5, a) == 1 || index($5, b) == 1 { print $5 }' /proc/self/mountinfo)
  [ -z "$l" ] || { echo "mounts left: $l" >&2; left=1; }
  l=$(for p in /proc/[0-9]*; do { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null | grep -q "$RUN_DIR" && echo "${p#/proc/}"; done || true)
  [ -z "$l" ] || { echo "processes left: $l" >&2; left=1; }
  l=$( (iptables-save; ip6tables-save) 2>/dev/null | grep -E 'DOCKER|br-[0-9a-f]{12}|docker0' || true)
  [ -z "$l" ] || { echo "firewall rules left: $l" >&2; left=1; }
  [ ! -e "$DOCKER_SOCK" ] || { echo "socket left: $DOCKER_SOCK" >&2; left=1; }
  return "$left"
}

cluster_checks() { # cluster_checks <label> <web node> <client node>
  step "$1: nodes Ready" nodes_ready
  step "$1: CoreDNS Ready" coredns_ready
  step "$1: kind load image-archive (OCI archive of $PROBE_REF)" load_probe
  step "$1: pods web on $2, client on $3 Running with IPs" pods "$2" "$3"
  say "    $(kc get pods -o wide --no-headers | awk '{ printf "%s %s %s on %s; ", $1, $3, $6, $7 }')"
  # Retried for a while: kube-proxy and CoreDNS pick up new Services and endpoints a little later.
  step "$1: DNS (kubernetes.default from the client pod)" wait_for 30 dns
  step "$1: Service web (by DNS name) from the client" wait_for 30 service
  step "$1: pod to pod ($3 → $2)" wait_for 30 pod_to_pod
}

say "kind selftest ($KIND_VERSION, $NODE_IMAGE)"
ENGINE_WAS_UP=0
if engine_up; then ENGINE_WAS_UP=1; fi
step "engine up" "$KIND_DIR/engine.sh" up
step "node image (build or reuse)" "$KIND_DIR/node-image.sh"
step "kubectl" k8s_tools
KUBECTL=$(cat "$WORK/kubectl")
step "probe image archive ($PROBE_REF)" probe_image

cp "$KIND_DIR/cluster.yaml" "$WORK/one.yaml"
sed 's/^- role: control-plane$/&\n- role: worker/' "$WORK/one.yaml" > "$WORK/two.yaml"

if grep -qx "$NAME" <<<"$(kind get clusters 2>/dev/null)"; then
  step "cluster $NAME left by an earlier run deleted" delete_cluster
fi
step "1 node: kind create cluster --wait 180s" create "$WORK/one.yaml"
cluster_checks "1 node" "$NAME-control-plane" "$NAME-control-plane"
report_sysctls
step "1 node: kind delete cluster" delete_cluster

step "2 nodes: kind create cluster --wait 180s" create "$WORK/two.yaml"
cluster_checks "2 nodes" "$NAME-control-plane" "$NAME-worker"
report_sysctls
if [ "${LAB_KIND_KEEP:-0}" = 1 ]; then exit 0; fi
step "2 nodes: kind delete cluster" delete_cluster

if [ "$ENGINE_WAS_UP" = 1 ]; then
  say "the engine was running before the selftest: left up, with its network (engine.sh down stops it)"
  exit 0
fi
step "kind's network deleted" quiet_rm_network
step "engine down" "$KIND_DIR/engine.sh" down
step "nothing left (containers, bridges, firewall rules, mounts, processes, socket)" nothing_left
