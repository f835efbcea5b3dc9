#!/usr/bin/env bash
# A private Docker engine for the kind runtime's tests: its own socket, data root, exec root and
# containerd, so nothing else on the machine sees an engine at the default socket and nothing the engine
# does outlives `down`.
#
#   scripts/env/kind/engine.sh up        install Debian's docker.io if dockerd is missing, start the engine
#   scripts/env/kind/engine.sh env       print `export DOCKER_HOST=...` (eval it; kind and docker follow it)
#   scripts/env/kind/engine.sh status    say whether it runs (exit 0 when it does)
#   scripts/env/kind/engine.sh down      remove its containers and networks, stop it by PID, and leave no
#                                    bridge, firewall rule, mount, process or changed sysctl behind
#
# Networks are on documentation ranges (see lib.sh): docker0 198.51.100.0/28, the `kind` network
# 198.51.100.16/28, every other network a /28 of 198.51.100.0/25. On a machine whose capability bounding
# set lacks capabilities (CapBnd of PID 1), privileged containers run through runc-capfilter, which drops
# the capabilities the machine cannot grant; elsewhere runc runs unwrapped.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The data root is in the versioned cache, not under the runtime folder: the node image (about 1 GB
# imported) and the images loaded into it survive `down`, so the next `up` does not re-import them.
# Versioned by the engine's version because the layout belongs to it.
engine_version() { dockerd --version | sed -n 's/^Docker version \([0-9]*\.[0-9]*\).*/\1/p'; }

install_docker() {
  [ "$(id -u)" -eq 0 ] || { echo "dockerd is missing and installing docker.io needs root" >&2; return 1; }
  # Debian's postinst starts the packaged service (on the default socket) unless policy-rc.d forbids it.
  local policy=/usr/sbin/policy-rc.d made=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; made=1; fi
  local rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io iptables jq >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io iptables jq >/dev/null; } \
    || rc=$?
  [ "$made" = 0 ] || rm -f "$policy"
  return "$rc"
}

record_host() {
  mkdir -p "$HOST"
  python3 "$KIND_DIR/firewall.py" save "$HOST/firewall"
  [ -f "$HOST/recorded" ] && return 0
  local s
  : > "$HOST/sysctls"
  for s in "${TOUCHED_SYSCTLS[@]}"; do
    [ -f "/proc/sys/$s" ] && echo "$s $(tr '\t' ' ' < "/proc/sys/$s")" >> "$HOST/sysctls"
  done
  ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' > "$HOST/links"
  : > "$HOST/paths"
  for s in /run/containerd /lib/modules /etc/docker/key.json; do [ -e "$s" ] && echo "$s" >> "$HOST/paths"; done
  touch "$HOST/recorded"
}

start_containerd() {
  local data=$1
  mkdir -p "$RUN_DIR/containerd"
  cat > "$RUN_DIR/containerd.toml" <<TOML
version = 2
root = "$data/containerd"
state = "$RUN_DIR/containerd/state"
# Lowering oom_score_adj needs CAP_SYS_RESOURCE, which some machines withhold.
oom_score = 0
# Only the engine talks to this containerd; it needs no CRI.
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$data/containerd/opt"
TOML
  # Our own containerd, not dockerd's managed one: dockerd 20.10 attaches to any containerd already
  # answering on the default socket, and the engine must never share one.
  start_proc containerd containerd --config "$RUN_DIR/containerd.toml"
  wait_for 30 ctr --address "$CONTAINERD_SOCK" version
}

start_dockerd() {
  local data=$1 args=()
  echo '{}' > "$RUN_DIR/daemon.json"
  if caps_missing; then
    args+=(--add-runtime "capfilter=$KIND_DIR/runc-capfilter" --default-runtime capfilter)
    echo "    capability bounding set $(awk '/^CapBnd:/ { print $2 }' /proc/self/status) is incomplete: default runtime runc-capfilter"
  fi
  # --ip-forward=false: the nodes share one bridge and nothing leaves the host, so the host's
  # ip_forward and FORWARD policy stay as they are. --iptables=true: kind's nodes rely on Docker's
  # embedded DNS, whose rules Docker installs inside each container, and on published ports.
  start_proc dockerd dockerd \
    -H "unix://$DOCKER_SOCK" --group root \
    --config-file "$RUN_DIR/daemon.json" \
    --data-root "$data/docker" --exec-root "$RUN_DIR/exec" --pidfile "$RUN_DIR/dockerd.pid" \
    --containerd "$CONTAINERD_SOCK" \
    --bip "$DOCKER_BIP" --default-address-pool "base=$DOCKER_POOL,size=$DOCKER_POOL_SIZE" \
    --iptables=true --ip-forward=false --ip-masq=true --userland-proxy=true \
    --oom-score-adjust 0 --storage-driver overlay2 --log-level warn "${args[@]}"
  if ! wait_for 60 docker_ version; then
    echo "dockerd does not answer on $DOCKER_SOCK; last lines of $LOGS/dockerd.log:" >&2
    tail -n 20 "$LOGS/dockerd.log" >&2
    return 1
  fi
}

kind_network() {
  docker_ network inspect "$KIND_NETWORK" >/dev/null 2>&1 && return 0
  # The options kind itself gives the network it creates (IPv4 only: the lab's clusters are IPv4).
  docker_ network create -d bridge --subnet "$KIND_SUBNET" --gateway "$KIND_GATEWAY" \
    -o com.docker.network.bridge.enable_ip_masquerade=true "$KIND_NETWORK" >/dev/null
}

up() {
  if engine_up; then say "engine already running (pid $(recorded_pid dockerd)); $0 env"; return 0; fi
  local data
  command -v dockerd >/dev/null && command -v jq >/dev/null || step "docker.io installed from Debian" install_docker
  data="$CACHE/docker-$(engine_version)"
  install -d -m 0700 "$RUN_DIR"
  mkdir -p "$data" "$PIDS" "$LOGS"
  step "host recorded (firewall, links, sysctls)" record_host
  step "containerd on $CONTAINERD_SOCK" start_containerd "$data"
  step "dockerd on $DOCKER_SOCK (data root $data/docker)" start_dockerd "$data"
  step "network $KIND_NETWORK on $KIND_SUBNET" kind_network
  say "engine up: eval \"\$($0 env)\""
}

# --- down -----------------------------------------------------------------------------------------
remove_containers() {
  engine_up || return 0
  local ids nets
  ids=$(docker_ ps -aq)
  # shellcheck disable=SC2086  # one argument per ID
  [ -z "$ids" ] || docker_ rm -f -v $ids >/dev/null
  nets=$(docker_ network ls --format '{{.Name}}' | grep -vxE 'bridge|host|none' || true)
  # shellcheck disable=SC2086
  [ -z "$nets" ] || docker_ network rm $nets >/dev/null
  docker_ volume prune -f >/dev/null
}

# Processes that still belong to the engine: shims started by our containerd (they outlive it by
# design), docker-proxy children, and the two daemons themselves.
engine_pids() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null) || continue
    case "$cmd" in
      *"$RUN_DIR"*) echo "${p#/proc/}" ;;
    esac
  done
}

stop_engine() {
  stop_proc dockerd 30
  stop_proc containerd 15
  local p
  for p in $(engine_pids); do stop_pid "$p" 5; done
  [ -z "$(engine_pids)" ]
}

our_mounts() {
  local data
  data="$CACHE/docker-$(engine_version 2>/dev/null || echo x)"
  awk -v a="$RUN_DIR" -v b="$data" 'index($5, a) == 1 || index($5, b) == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

unmount_all() {
  local m
  for m in $(our_mounts); do umount "$m" 2>/dev/null || umount -l "$m"; done
  [ -z "$(our_mounts)" ]
}

remove_links() {
  local l
  for l in $(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E '^(docker0|br-[0-9a-f]{12}|veth[0-9a-f]+)$' || true); do
    grep -qx "$l" "$HOST/links" 2>/dev/null && continue
    ip link del "$l" 2>/dev/null || true
  done
  ! ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -E '^(docker0|br-[0-9a-f]{12})$' \
    | grep -vxF -f "$HOST/links"
}

restore_firewall() {
  [ -f "$HOST/firewall/saved" ] || { echo "no record of the firewall before up" >&2; return 1; }
  python3 "$KIND_DIR/firewall.py" sweep "$HOST/firewall" "$SUBNET_PREFIX" | sed 's/^/    /'
  if ! python3 "$KIND_DIR/firewall.py" check "$HOST/firewall" > "$ENGINE_STATE/firewall.diff"; then
    echo "the firewall differs from before up (another process may have changed it meanwhile):" >&2
    sed 's/^/    /' "$ENGINE_STATE/firewall.diff" >&2
    return 1
  fi
}

restore_sysctls() {
  local s v now
  [ -f "$HOST/sysctls" ] || return 0
  while read -r s v; do
    now=$(tr '\t' ' ' < "/proc/sys/$s" 2>/dev/null) || continue
    if [ "$now" != "$v" ]; then
      echo "    sysctl ${s//\//.}: $now -> $v (restored)"
      echo "$v" > "/proc/sys/$s"
    fi
  done < "$HOST/sysctls"
}

remove_paths() {
  local p
  # Left by the engine only when it did not exist before: shim sockets' folder (containerd's shims
  # put their sockets in /run/containerd/s whatever the state dir), the /lib/modules folder Docker
  # creates as the source of kind's bind mount, and dockerd's identity key.
  for p in /run/containerd/s /run/containerd /lib/modules; do
    grep -qx "${p%/s}" "$HOST/paths" 2>/dev/null && continue
    [ -d "$p" ] && rmdir "$p" 2>/dev/null || true
  done
  grep -qx /etc/docker/key.json "$HOST/paths" 2>/dev/null || rm -f /etc/docker/key.json
  rm -rf "$RUN_DIR"
}

down() {
  local rc=0
  if [ ! -d "$RUN_DIR" ] && [ ! -f "$HOST/recorded" ]; then say "engine not running; nothing to remove"; return 0; fi
  STEP_ERREXIT=0 step "containers, networks and volumes removed" remove_containers || rc=1
  STEP_ERREXIT=0 step "dockerd and containerd stopped (by PID), no engine process left" stop_engine || rc=1
  STEP_ERREXIT=0 step "no mount left under the engine's folders" unmount_all || rc=1
  STEP_ERREXIT=0 step "no bridge left (docker0, br-*)" remove_links || rc=1
  STEP_ERREXIT=0 step "firewall back as before up" restore_firewall || rc=1
  STEP_ERREXIT=0 step "host sysctls back as before up" restore_sysctls || rc=1
  STEP_ERREXIT=0 step "runtime folder removed" remove_paths || rc=1
  # The record is kept when something could not be restored, so a second `down` can finish the job.
  [ "$rc" != 0 ] || rm -rf "$HOST"
  return "$rc"
}

status() {
  if engine_up; then
    say "running (dockerd pid $(recorded_pid dockerd), DOCKER_HOST=unix://$DOCKER_SOCK)"
  else
    say "not running"
    return 1
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export DOCKER_HOST=unix://$DOCKER_SOCK" ;;
  status) status ;;
  *) echo "usage: $0 up|down|env|status" >&2; exit 2 ;;
esac
