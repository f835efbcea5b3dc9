#!/usr/bin/env bash
# A Kubernetes control plane without a node, for the runtime's control-plane tier
# (runtime-kube/tests/control_plane.rs): etcd, kube-apiserver, kube-scheduler and the controllers the lab's
# objects need, on loopback ports, with a token kubeconfig. The binaries come from scripts/env/k8s-node/build.sh
# (cached after the first, long build). Nothing runs pods: there is no kubelet.
#
#   scripts/ci/kube-control-plane.sh up      start (prints the kubeconfig path)
#   scripts/ci/kube-control-plane.sh test    up, run the control-plane tier, down
#   scripts/ci/kube-control-plane.sh down    stop what up started (by recorded PID) and remove its state
#
# Environment: LAB_CP_STATE (default ${TMPDIR:-/tmp}/straggler-lab-control-plane), LAB_CP_PORT_BASE
# (default 23790: etcd client, peer, metrics, then the API server, scheduler and controller manager).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
S=${LAB_CP_STATE:-${TMPDIR:-/tmp}/straggler-lab-control-plane}
P=${LAB_CP_PORT_BASE:-23790}
ETCD_CLIENT=$P ETCD_PEER=$((P + 1)) ETCD_METRICS=$((P + 2)) API=$((P + 3)) SCHED=$((P + 4)) CM=$((P + 5))
say() { printf '[control-plane] %s\n' "$*" >&2; }

start() { # start <name> <command...>: runs it in its own session, logs and PID in the state folder
  local name=$1; shift
  setsid "$@" >"$S/$name.log" 2>&1 < /dev/null &
  echo $! > "$S/$name.pid"
}

wait_for() { # wait_for <seconds> <command...>
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 1
  done
}

up() {
  local bin
  bin=$("$root/scripts/env/k8s-node/build.sh")
  mkdir -p "$S"
  chmod 700 "$S"
  if [ -f "$S/kube-apiserver.pid" ] && kill -0 "$(cat "$S/kube-apiserver.pid")" 2>/dev/null; then
    say "already up"; echo "$S/kubeconfig"; return 0
  fi
  [ -f "$S/sa.key" ] || { openssl genrsa -out "$S/sa.key" 2048 2>/dev/null; openssl rsa -in "$S/sa.key" -pubout -out "$S/sa.pub" 2>/dev/null; }
  local token; token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$token,admin,admin,system:masters" > "$S/tokens.csv"
  cat > "$S/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: control-plane
  cluster:
    server: https://127.0.0.1:$API
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $token
contexts:
- name: control-plane
  context: {cluster: control-plane, user: admin}
current-context: control-plane
KC
  chmod 600 "$S/kubeconfig" "$S/tokens.csv"
  start etcd "$bin/etcd" --name cp --data-dir "$S/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster "cp=http://127.0.0.1:$ETCD_PEER" --listen-metrics-urls "http://127.0.0.1:$ETCD_METRICS"
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_CLIENT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API" --cert-dir "$S/certs" \
    --token-auth-file "$S/tokens.csv" --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$S/sa.pub" \
    --service-account-signing-key-file "$S/sa.key" --service-cluster-ip-range 10.97.0.0/16
  wait_for 90 curl -ksf -H "Authorization: Bearer $token" "https://127.0.0.1:$API/readyz" \
    || { tail -n 20 "$S/kube-apiserver.log" >&2; say "the API server did not become ready"; return 1; }
  local kcs=(--kubeconfig "$S/kubeconfig" --authentication-kubeconfig "$S/kubeconfig" --authorization-kubeconfig "$S/kubeconfig")
  start kube-scheduler "$bin/kube-scheduler" "${kcs[@]}" --bind-address 127.0.0.1 --secure-port "$SCHED" \
    --leader-elect=false --cert-dir "$S/scheduler-certs"
  start kube-controller-manager "$bin/kube-controller-manager" "${kcs[@]}" --bind-address 127.0.0.1 \
    --secure-port "$CM" --leader-elect=false --cert-dir "$S/cm-certs" \
    --controllers=statefulset,job,deployment,replicaset,garbagecollector,namespace,serviceaccount,serviceaccount-token,podgc \
    --service-account-private-key-file "$S/sa.key" --root-ca-file "$S/certs/apiserver.crt"
  say "up: API server on 127.0.0.1:$API"
  echo "$S/kubeconfig"
}

down() {
  local name pid
  for name in kube-controller-manager kube-scheduler kube-apiserver etcd; do
    [ -f "$S/$name.pid" ] || continue
    pid=$(cat "$S/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$S/$name.pid"
  done
  rm -rf "$S"
  say "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  test)
    trap down EXIT
    kc=$(up)
    # The binary the test command built, with the workspace's feature set (`--test control_plane` alone
    # would resolve other features and rebuild kube's crates).
    bin=$("$root/scripts/ci/test-bins.sh" lab-runtime-kube control_plane | cut -f2)
    (cd "$root/runtime" && LAB_TEST_KUBECONFIG="$kc" "$bin" --ignored --nocapture)
    ;;
  *) echo "usage: $0 up|down|test" >&2; exit 2 ;;
esac
