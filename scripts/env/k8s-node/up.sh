#!/usr/bin/env bash
# Brings up a real single-node Kubernetes on this machine, for the lab's Kubernetes tests: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd (its own socket and state), the
# kubelet and kube-proxy (iptables mode, so ClusterIP Services work without DNS), a CNI bridge, the
# lab's images imported offline, and N GPUs advertised as an extended resource on the node.
#
#   scripts/env/k8s-node/up.sh          idempotent: starts only what is not running yet
#
# Prints the admin kubeconfig path at the end. Everything it creates lives in the state directory
# (LAB_K8S_STATE, default ~/.local/state/straggler-lab-k8s) or is recorded there so that
# scripts/env/k8s-node/down.sh can remove it. Parameters: see lib.sh. Needs root (it runs containers).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[ "$(id -u)" -eq 0 ] || { echo "up.sh runs a kubelet and containers: run it as root" >&2; exit 1; }
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
# The state directory's missing parents are created here and removed again by down.sh.
created_parents=()
d=$(dirname "$S")
while [ ! -d "$d" ]; do created_parents+=("$d"); d=$(dirname "$d"); done
mkdir -p "$S" "$LOGS" "$PIDS"
[ -f "$S/created-parents" ] || printf '%s\n' "${created_parents[@]}" > "$S/created-parents"
chmod 700 "$S"
echo "$NODE_IP" > "$S/node-ip"
trap 'rc=$?; [ $rc -eq 0 ] || echo "up.sh failed after $(elapsed "$T0"); logs are in $LOGS; scripts/env/k8s-node/down.sh removes what was started" >&2' EXIT

say "k8s-node up: node $NODE at $NODE_IP, state in $S"

# --- host packages --------------------------------------------------------------------------------
install_packages() {
  local want=(containerd runc containernetworking-plugins iptables nftables conntrack openssl curl iproute2
              gcc libc6-dev python3 busybox) missing=() p
  for p in "${want[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "    installing from Debian: ${missing[*]}"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
      || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; }
  } >>"$LOGS/apt.log" 2>&1
}

# --- binaries and images --------------------------------------------------------------------------
build_binaries() {
  BIN=$("$K8S_NODE_DIR/build.sh" 2>>"$LOGS/build.log") || { tail -n 20 "$LOGS/build.log" >&2; return 1; }
  echo "$BIN" > "$S/bin-dir"
}

# The reference as containerd stores it and the kubelet asks for it: one without a domain gets docker.io
# (and library/ when it has one component), one without a tag :latest.
stored_as() {
  local ref=$1 first=${1%%/*}
  if [[ $ref != */* ]]; then ref="docker.io/library/$ref"
  elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then ref="docker.io/$ref"; fi
  [[ ${ref##*/} == *[:@]* ]] || ref="$ref:latest"
  echo "$ref"
}

# The lab's images, by the lab's own offline builder (`lab image build`): the workspace built for release
# first, since the lab image is made of the binaries beside the `lab` that builds it. images.txt has one
# line per image: "<reference> <archive> <image id> <reference as containerd stores it>".
build_images() {
  local target
  (cd "$LAB_ROOT" && cargo build --release --bins) >>"$LOGS/images.log" 2>&1 \
    || { tail -n 20 "$LOGS/images.log" >&2; return 1; }
  target=$(cd "$LAB_ROOT" && cargo metadata --no-deps --format-version 1 \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  [ -n "${LAB_WEED:-}" ] || eval "$("$LAB_ROOT/scripts/tools.sh" weed)"
  (cd "$LAB_ROOT" && LAB_WEED=$LAB_WEED "$target/release/lab" image build --only pause,lab \
    --out "$CACHE/images") > "$S/images.new" 2>>"$LOGS/images.log" \
    || { tail -n 20 "$LOGS/images.log" >&2; return 1; }
  local ref tar id
  while read -r ref tar id; do echo "$ref $tar $id $(stored_as "$ref")"; done < "$S/images.new" > "$S/images.txt"
  rm -f "$S/images.new"
  PAUSE_IMAGE=$(awk '$1 ~ /\/pause:/ {print $4}' "$S/images.txt")
  [ -n "$PAUSE_IMAGE" ]
}

# --- what the host looked like before ---------------------------------------------------------------
save_host_state() {
  [ -f "$HOST/saved" ] && return 0
  mkdir -p "$HOST"
  local k fam t d
  : > "$HOST/sysctls"
  for k in "${TOUCHED_SYSCTLS[@]}"; do
    [ -f "/proc/sys/$k" ] && echo "$k $(cat "/proc/sys/$k")" >> "$HOST/sysctls"
  done
  : > "$HOST/dirs"
  for d in "${SHARED_DIRS[@]}"; do [ -e "$d" ] && echo "$d" >> "$HOST/dirs"; done
  for fam in iptables ip6tables; do
    # With the nf_tables backend a table exists only once something writes to it; down.sh removes the
    # tables that did not exist before and are empty again.
    "$fam-save" 2>/dev/null | awk '/^\*/ { print substr($1, 2) }' > "$HOST/tables.$fam" || true
    for t in filter nat mangle raw; do
      "$fam" -w 5 -t "$t" -S 2>/dev/null | awk '$1 == "-N" {print $2}' > "$HOST/chains.$fam.$t" || true
    done
  done
  ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' > "$HOST/links"
  touch "$HOST/saved"
}

check_host() {
  if grep -qx "$BRIDGE" "$HOST/links"; then
    echo "a network link named $BRIDGE existed before the node: set LAB_K8S_BRIDGE to another name" >&2
    return 1
  fi
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then CGROUP_VERSION=2; else CGROUP_VERSION=1; fi
  echo "$CGROUP_VERSION" > "$S/cgroup-version"
}

# write_config <file> [<component>]: writes stdin to the file only when the content differs, and then
# restarts the component if it runs (kube-proxy even exits by itself when its config file changes).
write_config() {
  local file=$1 component=${2:-}
  (umask 077; cat > "$file.new")
  if [ -f "$file" ] && cmp -s "$file" "$file.new"; then
    rm -f "$file.new"
    return 0
  fi
  mv "$file.new" "$file"
  if [ -n "$component" ] && running "$component"; then
    echo "    $(basename "$file") changed: restarting $component"
    stop_proc "$component" 15
  fi
}

# --- certificates and kubeconfigs ---------------------------------------------------------------------
gen_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null && chmod 600 "$1"; }

# gen_cert <name> <subject> <extendedKeyUsage> [subjectAltName]
gen_cert() {
  local name=$1 subj=$2 usage=$3 sans=${4:-}
  [ -s "$PKI/$name.crt" ] && return 0
  gen_key "$PKI/$name.key"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$usage"
    [ -z "$sans" ] || echo "subjectAltName=$sans"
  } > "$PKI/$name.ext"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 -extfile "$PKI/$name.ext" \
    -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

first_service_ip() { python3 -c 'import ipaddress, sys; print(ipaddress.ip_network(sys.argv[1])[1])' "$SERVICE_CIDR"; }

make_pki() {
  mkdir -p "$PKI" && chmod 700 "$PKI"
  if [ ! -s "$PKI/ca.crt" ]; then
    gen_key "$PKI/ca.key"
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=straggler-lab-node-ca" -days 3650 -sha256 \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "$PKI/ca.crt" 2>/dev/null
  fi
  local svc_ip
  svc_ip=$(first_service_ip)
  gen_cert etcd-server "/CN=etcd" serverAuth,clientAuth "IP:127.0.0.1,DNS:localhost"
  gen_cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
  gen_cert apiserver "/CN=kube-apiserver" serverAuth \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$NODE,IP:$svc_ip,IP:$NODE_IP,IP:127.0.0.1"
  # system:masters: the kubelet's webhook authorizer then allows the API server's exec/logs calls.
  gen_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  gen_cert kubelet "/O=system:nodes/CN=system:node:$NODE" clientAuth
  gen_cert kubelet-serving "/CN=$NODE" serverAuth "DNS:$NODE,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1"
  gen_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  gen_cert scheduler "/CN=system:kube-scheduler" clientAuth
  gen_cert kube-proxy "/CN=system:kube-proxy" clientAuth
  gen_cert admin "/O=system:masters/CN=lab-admin" clientAuth
  if [ ! -s "$PKI/sa.key" ]; then
    gen_key "$PKI/sa.key"
    openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

# write_kubeconfig <file> <cert name>: credentials embedded, so the file stands alone.
write_kubeconfig() {
  local file=$1 name=$2
  write_config "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: straggler-lab
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: straggler-lab
  context:
    cluster: straggler-lab
    user: $name
    namespace: default
current-context: straggler-lab
EOF
  chmod 600 "$file"
}

make_kubeconfigs() {
  mkdir -p "$S/kubeconfig"
  local n
  for n in controller-manager scheduler kubelet kube-proxy; do write_kubeconfig "$S/kubeconfig/$n" "$n"; done
  write_kubeconfig "$KUBECONFIG_ADMIN" admin
}

# --- control plane ------------------------------------------------------------------------------------
port_free_or_ours() { # <name> <addr> <port>
  running "$1" && return 0
  if ss -Hltn "sport = :$3" | grep -q .; then
    echo "port $3 is already in use (needed by $1): stop what listens there, or run down.sh first" >&2
    return 1
  fi
}

curl_admin() { curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"; }

start_etcd() {
  port_free_or_ours etcd 127.0.0.1 2379
  port_free_or_ours etcd 127.0.0.1 2380
  mkdir -p "$S/etcd" && chmod 700 "$S/etcd"
  start_proc etcd "$BIN/etcd" --name lab --data-dir "$S/etcd" \
    --listen-client-urls https://127.0.0.1:2379 --advertise-client-urls https://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster lab=http://127.0.0.1:2380 --initial-cluster-state new \
    --cert-file "$PKI/etcd-server.crt" --key-file "$PKI/etcd-server.key" \
    --trusted-ca-file "$PKI/ca.crt" --client-cert-auth \
    --logger zap --log-outputs stderr
  wait_up etcd 30 curl -fsS --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/etcd-server.crt" \
    --key "$PKI/etcd-server.key" https://127.0.0.1:2379/health
}

start_apiserver() {
  port_free_or_ours kube-apiserver "$NODE_IP" 6443
  start_proc kube-apiserver "$BIN/kube-apiserver" \
    --advertise-address "$NODE_IP" --bind-address "$NODE_IP" --secure-port 6443 \
    --etcd-servers https://127.0.0.1:2379 --etcd-cafile "$PKI/ca.crt" \
    --etcd-certfile "$PKI/apiserver-etcd-client.crt" --etcd-keyfile "$PKI/apiserver-etcd-client.key" \
    --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP,Hostname \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true --profiling=false \
    --cert-dir "$S/pki/apiserver-generated" --event-ttl 1h --v 1
  wait_up kube-apiserver 120 curl_admin "https://$NODE_IP:6443/readyz"
}

start_controller_manager() {
  port_free_or_ours kube-controller-manager 127.0.0.1 10257
  local kcfg="$S/kubeconfig/controller-manager"
  start_proc kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$kcfg" --authentication-kubeconfig "$kcfg" --authorization-kubeconfig "$kcfg" \
    --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
    --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
    --use-service-account-credentials=true --service-cluster-ip-range "$SERVICE_CIDR" \
    --cluster-name straggler-lab --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --profiling=false --v 1
  wait_up kube-controller-manager 60 curl -fsSk --max-time 2 https://127.0.0.1:10257/healthz
}

start_scheduler() {
  port_free_or_ours kube-scheduler 127.0.0.1 10259
  local kcfg="$S/kubeconfig/scheduler"
  start_proc kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$kcfg" --authentication-kubeconfig "$kcfg" --authorization-kubeconfig "$kcfg" \
    --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false --v 1
  wait_up kube-scheduler 60 curl -fsSk --max-time 2 https://127.0.0.1:10259/healthz
}

# --- node -------------------------------------------------------------------------------------------
make_cgroups() {
  local d parent
  for d in $(cgroup_dirs); do
    [ -d "$d" ] && continue
    mkdir "$d"
    # A new v1 cpuset cgroup starts with no CPUs and no memory nodes: give it its parent's.
    if [ -f "$d/cpuset.cpus" ]; then
      parent=$(dirname "$d")
      cat "$parent/cpuset.cpus" > "$d/cpuset.cpus"
      cat "$parent/cpuset.mems" > "$d/cpuset.mems"
    fi
  done
}

# CAP_SYS_RESOURCE is capability 24; some VMs and containers run root without it.
has_cap_sys_resource() {
  local eff
  eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  (( (16#$eff >> 24) & 1 ))
}

start_containerd() {
  local RESTRICT_OOM=false
  has_cap_sys_resource || RESTRICT_OOM=true
  mkdir -p "$S/containerd/root" "$S/containerd/state" "$S/containerd/opt" "$S/runc" "$S/cni/net.d" "$S/cni/ipam"
  write_config "$S/containerd/config.toml" containerd <<EOF
version = 2
root = "$S/containerd/root"
state = "$S/containerd/state"

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$S/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Loading a profile would change the host's AppArmor state; this node has no business there.
  disable_apparmor = true
  # Pod network namespaces under the state directory instead of the host's /var/run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Without CAP_SYS_RESOURCE no process may lower an oom_score_adj below its own, and runc fails to
  # start the sandbox (-998) or a Guaranteed pod (-997): clamp to containerd's own score instead.
  restrict_oom_score_adj = $RESTRICT_OOM
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$S/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$S/cni/net.d"
    max_conf_num = 1
EOF
  write_config "$S/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$S/cni/ipam"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
  local p
  for p in bridge host-local loopback portmap; do
    [ -x "$CNI_BIN/$p" ] || { echo "CNI plugin $CNI_BIN/$p is missing: apt-get install containernetworking-plugins" >&2; return 1; }
  done
  start_proc containerd containerd --config "$S/containerd/config.toml"
  wait_up containerd 30 ctr --address "$SOCK" version
}

# manifest_of <name>: the manifest digest containerd holds under that name (empty when none).
manifest_of() { ctr_ images ls "name==$1" 2>/dev/null | awk 'NR > 1 {print $3}'; }

# An image is imported already when its reference holds the manifest containerd made for the image id
# (the CRI plugin names every image by its id too): same id, same image.
import_images() {
  local short tar id ref have
  while read -r short tar id ref; do
    have=$(manifest_of "$ref")
    if [ -n "$have" ] && [ "$have" = "$(manifest_of "$id")" ]; then
      echo "    $short already imported ($id)"
      continue
    fi
    ctr_ images import --platform linux/amd64 "$tar" >>"$LOGS/images.log" 2>&1 \
      || { echo "importing $tar failed; see $LOGS/images.log" >&2; return 1; }
    [ -n "$(manifest_of "$ref")" ] || { echo "$ref is not in containerd after importing $tar" >&2; return 1; }
    echo "    imported $short ($id)"
  done < "$S/images.txt"
}

node_ready() {
  [ "$(kc get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

start_kubelet() {
  port_free_or_ours kubelet "$NODE_IP" 10250
  mkdir -p "$S/kubelet" "$S/pod-logs" "$S/kubelet/volume-plugins"
  local KUBELET_OOM=-999
  has_cap_sys_resource || KUBELET_OOM=0
  write_config "$S/kubelet.yaml" kubelet <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
rotateCertificates: false
serverTLSBootstrap: false
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /$CGROUP_NAME
failSwapOn: false
podLogsDir: $S/pod-logs
volumePluginDir: $S/kubelet/volume-plugins
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
hairpinMode: hairpin-veth
maxPods: 110
# The lab's pods must not be evicted because the shared disk of a build machine is fuller than a
# production node's thresholds would like.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# -999 is the kubelet's default; lowering a score needs CAP_SYS_RESOURCE.
oomScoreAdj: $KUBELET_OOM
EOF
  start_proc kubelet "$BIN/kubelet" --config "$S/kubelet.yaml" --kubeconfig "$S/kubeconfig/kubelet" \
    --root-dir "$S/kubelet" --hostname-override "$NODE" --node-ip "$NODE_IP" --v 1
  wait_up kubelet 180 node_ready
}

start_kube_proxy() {
  port_free_or_ours kube-proxy 127.0.0.1 10256
  write_config "$S/kube-proxy.yaml" kube-proxy <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $S/kubeconfig/kube-proxy
hostnameOverride: $NODE
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
mode: iptables
clusterCIDR: $POD_CIDR
detectLocalMode: ClusterCIDR
nodePortAddresses: ["primary"]
# Zero leaves the host's conntrack settings as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
# Leave kube-proxy's own OOM score alone (lowering it needs CAP_SYS_RESOURCE).
oomScoreAdj: 0
iptables:
  localhostNodePorts: false
  masqueradeAll: false
  syncPeriod: 30s
  minSyncPeriod: 1s
EOF
  start_proc kube-proxy "$BIN/kube-proxy" --config "$S/kube-proxy.yaml" --v 1
  wait_up kube-proxy 60 curl -fsS --max-time 2 http://127.0.0.1:10256/healthz
}

gpu_allocatable() {
  local key=${GPU_RESOURCE//./\\.}
  kc get node "$NODE" -o jsonpath="{.status.allocatable['$key']}"
}

advertise_gpus() {
  local path="/status/capacity/${GPU_RESOURCE//\//~1}"
  kc patch node "$NODE" --subresource=status --type=json \
    -p "[{\"op\":\"add\",\"path\":\"$path\",\"value\":\"$GPU_COUNT\"}]" >/dev/null
  # The kubelet copies capacity into allocatable on its next status update.
  wait_for 60 test_gpu_allocatable \
    || { echo "allocatable $GPU_RESOURCE is '$(gpu_allocatable)', expected $GPU_COUNT" >&2; return 1; }
}
test_gpu_allocatable() { [ "$(gpu_allocatable)" = "$GPU_COUNT" ]; }

default_service_account() { kc -n default get serviceaccount default >/dev/null 2>&1; }

# --- run --------------------------------------------------------------------------------------------
step "host packages (containerd, runc, CNI plugins, iptables, conntrack)" install_packages
step "Kubernetes and etcd binaries (cache: $CACHE)" build_binaries
BIN=$(cat "$S/bin-dir")
step "images built offline (pause, lab)" build_images
PAUSE_IMAGE=$(awk '$1 ~ /\/pause:/ {print $4}' "$S/images.txt")
step "host state recorded for down.sh" save_host_state
step "host checks (bridge name free, cgroup layout)" check_host
step "certificates and service-account keys" make_pki
step "kubeconfigs" make_kubeconfigs
step "etcd $("$BIN/etcd" --version | awk 'NR == 1 {print $3}') on 127.0.0.1:2379" start_etcd
step "kube-apiserver on $NODE_IP:6443" start_apiserver
step "kube-controller-manager" start_controller_manager
step "kube-scheduler" start_scheduler
step "pod cgroup /$CGROUP_NAME" make_cgroups
step "containerd on $SOCK" start_containerd
step "images imported into containerd (k8s.io)" import_images
step "kubelet; node $NODE Ready" start_kubelet
step "kube-proxy (iptables mode)" start_kube_proxy
step "$GPU_COUNT × $GPU_RESOURCE advertised and allocatable" advertise_gpus
step "default service account" wait_for 60 default_service_account
say "node $NODE is up in $(elapsed "$T0")"
say "kubeconfig: $KUBECONFIG_ADMIN"
say "  export KUBECONFIG=$KUBECONFIG_ADMIN"
