#!/usr/bin/env bash
# Builds an offline kind node image for Kubernetes $K8S_VERSION into the private Docker engine and saves
# it as an archive a fresh engine can `docker load`, the way kind's own build assembles one (`kind build
# node-image` cannot be used: it fetches etcd, coredns, pause and kindnetd from a registry).
#
#   scripts/env/kind/node-image.sh        build (or reuse) straggler-lab/kind-node:<version>; prints the
#                                     image reference and the archive on the last line
#   scripts/env/kind/node-image.sh base   only the base image (straggler-lab/kind-base:bookworm-<hash>)
#
# Steps:
#   1. kind's base files, from the kind Go module (images/base/files), as kind's images/base/Dockerfile
#      applies them, on a debootstrap bookworm minbase with systemd, containerd, runc and the CNI plugins
#      from Debian (linked where kind's units expect them), then `docker import` + a Dockerfile FROM it for
#      what import refuses (STOPSIGNAL, ENTRYPOINT).
#   2. The component images, built offline as OCI archives under the names kubeadm looks for.
#   3. A build container from the base: the Kubernetes binaries into /usr/bin, /kind/version, the
#      manifests, the images into /kind/images and `ctr -n k8s.io images import`ed, then `docker commit`
#      with the entrypoint restored (kind's pkg/build/nodeimage sequence).
# Needs the engine (scripts/env/kind/engine.sh up) and root (debootstrap, chroot). Everything is cached in
# versioned folders under ${LAB_CACHE:-~/.cache/straggler-lab} and reused when its inputs did not change.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Packages of the node's base (kind's list, minus what the lab does not use: NFS, iSCSI, fuse-overlayfs),
# plus Debian's containerd, runc and CNI plugins in place of kind's own builds.
BASE_PACKAGES=(systemd systemd-sysv dbus conntrack iptables nftables iproute2 ethtool util-linux mount kmod
  libseccomp2 pigz bash ca-certificates jq procps containerd runc containernetworking-plugins)
BASE_CACHE="$CACHE/kind-base-bookworm"
ROOTFS_TAR="$BASE_CACHE/rootfs-$(printf '%s\n' "${BASE_PACKAGES[@]}" | sha256sum | cut -c1-12).tar"
IMAGES="$NODE_CACHE/images"
ARCHIVE="$NODE_CACHE/kind-node.tar"
OCI_IMAGE="$KIND_DIR/oci-image.py"
# Named here, not in the step that creates it: steps run in subshells, and the exit trap must know it.
BUILD_CONTAINER="lab-kind-build-$$"

cleanup() {
  docker_ rm -f -v "$BUILD_CONTAINER" >/dev/null 2>&1 || true
  [ -z "${WORK:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
WORK=$(mktemp -d "${TMPDIR:-/tmp}/lab-kind-node.XXXXXX")

# quiet <command...>: its output only when it fails (the engine's CLI warns about the legacy builder
# and the host's ip_forward, both expected here).
quiet() { "$@" > "$WORK/quiet.log" 2>&1 || { local rc=$?; cat "$WORK/quiet.log" >&2; return "$rc"; }; }

# --- inputs ---------------------------------------------------------------------------------------
kind_source() {
  local dir
  dir=$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
  [ -d "$dir/images/base/files" ] || { echo "no images/base/files in $dir" >&2; return 1; }
  echo "$dir" > "$WORK/kind-dir"
}

k8s_binaries() {
  local dir b
  dir=$("$LAB_ROOT/scripts/env/k8s-node/build.sh")
  for b in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd; do
    [ -x "$dir/$b" ] || { echo "$dir/$b is missing" >&2; return 1; }
  done
  echo "$dir" > "$WORK/k8s-dir"
}

coredns_binary() {
  local bin="$CACHE/coredns-$COREDNS_VERSION/bin"
  if [ ! -x "$bin/coredns" ]; then
    mkdir -p "$bin"
    GOBIN="$bin" CGO_ENABLED=0 nice -n 10 go install -trimpath -ldflags "-s -w" \
      "github.com/coredns/coredns@$COREDNS_VERSION" >&2
  fi
  case "$("$bin/coredns" -version)" in *"CoreDNS-${COREDNS_VERSION#v}"*) ;; *) echo "coredns is not $COREDNS_VERSION" >&2; return 1 ;; esac
  echo "$bin/coredns" > "$WORK/coredns"
}

debootstrap_rootfs() {
  [ -f "$ROOTFS_TAR" ] && return 0
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
  local root="$WORK/debootstrap" list
  list=$(IFS=,; echo "${BASE_PACKAGES[*]}")
  mkdir -p "$BASE_CACHE"
  nice -n 10 debootstrap --variant=minbase --include="$list" bookworm "$root" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap.log" >&2; return 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" --numeric-owner -cf "$ROOTFS_TAR.tmp" .
  mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
  rm -rf "$root"
}

# Hashes of what the base and the node image are made from: a changed input gives a new image.
base_hash() {
  {
    echo "$KIND_VERSION $ROOTFS_TAR"
    cat "$KIND_DIR/node-image.sh" "$KIND_DIR/runc-capfilter" "$KIND_DIR"/node/*
  } | sha256sum | cut -c1-16
}

inputs_hash() {
  {
    base_hash
    echo "$K8S_VERSION $COREDNS_VERSION"
    cat "$OCI_IMAGE" "$LAB_ROOT/scripts/images/pause.c"
    stat -c '%n %s %Y' "$(cat "$WORK/k8s-dir")"/* "$(cat "$WORK/coredns")"
  } | sha256sum | cut -c1-16
}

# --- 1. base image --------------------------------------------------------------------------------
base_image() {
  local tag=$1 kind r f
  docker_ image inspect "$tag" >/dev/null 2>&1 && return 0
  kind="$(cat "$WORK/kind-dir")/images/base"
  r="$WORK/rootfs"
  mkdir -p "$r"
  tar -C "$r" -xf "$ROOTFS_TAR"
  # images/base/Dockerfile: static files with its modes.
  install -m 0755 "$kind"/files/usr/local/bin/* "$r/usr/local/bin/"
  mkdir -p "$r/kind" "$r/LICENSES"
  cp -r "$kind/files/kind/." "$r/kind/"
  find "$r/kind" -type f -exec chmod 0644 {} + && chmod 0755 "$r/kind/bin" "$r"/kind/bin/*
  install -m 0644 "$kind"/files/LICENSES/* "$r/LICENSES/"
  install -m 0644 "$kind/files/etc/crictl.yaml" "$r/etc/"
  for f in containerd default sysctl.d systemd/system systemd/system/kubelet.service.d; do
    mkdir -p "$r/etc/$f"
    find "$kind/files/etc/$f" -maxdepth 1 -type f -exec install -m 0644 {} "$r/etc/$f/" \;
  done
  # ... its package-install RUN: services systemd must not start in a container.
  rm -f "$r/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service" \
    "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
    "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
    "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >> "$r/etc/systemd/journald.conf"
  ln -sf /lib/systemd/systemd "$r/sbin/init"
  mkdir -p "$r/etc/kubernetes/manifests"
  # Debian's containerd, runc and CNI plugins where kind's units and config expect kind's own builds.
  ln -sf /usr/bin/containerd "$r/usr/local/bin/containerd"
  ln -sf /usr/bin/ctr "$r/usr/local/bin/ctr"
  ln -sf /usr/bin/containerd-shim-runc-v2 "$r/usr/local/bin/containerd-shim-runc-v2"
  mkdir -p "$r/opt/cni"
  ln -sfn /usr/lib/cni "$r/opt/cni/bin"
  # runc through the capability filter: the node container itself lacks what the machine withholds, and
  # privileged pods (kube-proxy) would ask for it. A no-op where the bounding set is complete.
  install -m 0755 "$KIND_DIR/runc-capfilter" "$r/usr/local/sbin/runc"
  # The build stage's cri-base.json: containerd's default spec plus kind's product-files hook, no rlimits.
  chroot "$r" /usr/bin/ctr oci spec \
    | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' > "$r/etc/containerd/cri-base.json"
  # containerd: lowering oom_score_adj needs CAP_SYS_RESOURCE (the entrypoint only sets this for
  # rootless); runc named explicitly so the filter is used whatever PATH the shim has.
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' "$r/etc/containerd/config.toml"
  grep -q 'restrict_oom_score_adj = true' "$r/etc/containerd/config.toml"
  sed -i '/runtimes.runc.options\]/a\    BinaryName = "/usr/local/sbin/runc"' "$r/etc/containerd/config.toml"
  # Pod networking without kindnet.
  install -m 0755 "$KIND_DIR/node/lab-routes" "$r/usr/local/bin/lab-routes"
  install -m 0644 "$KIND_DIR/node/lab-routes.service" "$r/etc/systemd/system/lab-routes.service"
  systemctl --root="$r" enable kubelet.service containerd.service undo-mount-hacks.service lab-routes.service >/dev/null 2>&1
  systemctl --root="$r" mask systemd-binfmt.service >/dev/null 2>&1
  rm -f "$r/etc/machine-id" "$r/var/lib/dbus/machine-id" && touch "$r/etc/machine-id"
  tar -C "$r" --numeric-owner -c . | docker_ import - "$tag-import" >/dev/null
  rm -rf "$r"
  # `docker import --change` refuses STOPSIGNAL: a Dockerfile FROM the local import needs no registry.
  mkdir -p "$WORK/base-build"
  cat > "$WORK/base-build/Dockerfile" <<DOCKERFILE
FROM $tag-import
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
DOCKERFILE
  quiet docker_ build -q -t "$tag" "$WORK/base-build"
  docker_ rmi "$tag-import" >/dev/null
}

# --- 2. component images --------------------------------------------------------------------------
# add_path <spec> <root> <absolute path in root>: the file at its path with directory symlinks resolved
# inside the root (bin, sbin, lib, lib64 are symlinks into usr, as in Debian); a file that is itself a
# symlink (the loader in /usr/lib64, versioned libraries) is added as that symlink plus its target.
add_path() {
  local spec=$1 r=$2 p=$3 d f t
  d=$(chroot "$r" readlink -f "$(dirname "$p")")
  f="${d#/}/$(basename "$p")"
  f=${f#/}
  if [ -L "$r/$f" ]; then
    t=$(readlink "$r/$f")
    echo "symlink $f $t" >> "$spec"
    case "$t" in /*) add_path "$spec" "$r" "$t" ;; *) add_path "$spec" "$r" "$d/$t" ;; esac
  else
    echo "file $f $r/$f" >> "$spec"
  fi
}

# add_from_rootfs <spec> <root> <binary path in root>: the binary and every library it loads (ldd
# inside the root).
add_from_rootfs() {
  local spec=$1 r=$2 bin=$3 p
  for p in "$bin" $(chroot "$r" ldd "$bin" | awk '/=> \// {print $3} /^\t\// {print $1}'); do
    add_path "$spec" "$r" "$p"
  done
}

merged_usr_links() {
  printf 'symlink bin usr/bin\nsymlink sbin usr/sbin\nsymlink lib usr/lib\nsymlink lib64 usr/lib64\ndir tmp 1777\n'
}

oci() { # oci <archive name> <ref> <spec> [oci-image.py options]
  local name=$1 ref=$2 spec=$3
  shift 3
  python3 "$OCI_IMAGE" --spec "$spec" --name "$ref" --out "$IMAGES/$name.oci.tar" "$@" >/dev/null
  echo "$name $ref" >> "$WORK/images.list"
}

component_images() {
  local k8s r spec b pause_ref etcd_ref coredns_ref required
  k8s=$(cat "$WORK/k8s-dir")
  mkdir -p "$IMAGES"
  : > "$WORK/images.list"
  # The names come from kubeadm itself, and the pause image from the sandbox_image of containerd's
  # config (kind's base files), as kind's build does.
  required=$("$k8s/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null)
  etcd_ref=$(grep '/etcd:' <<<"$required")
  coredns_ref=$(grep '/coredns:' <<<"$required")
  pause_ref=$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$(cat "$WORK/kind-dir")/images/base/files/etc/containerd/config.toml")
  [ "$coredns_ref" = "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" ] \
    || { echo "kubeadm wants $coredns_ref, this script builds CoreDNS $COREDNS_VERSION" >&2; return 1; }
  for b in kube-apiserver kube-controller-manager kube-scheduler; do
    echo "file usr/local/bin/$b $k8s/$b 0755" > "$WORK/$b.spec"
    oci "$b" "registry.k8s.io/$b:$K8S_VERSION" "$WORK/$b.spec"
  done
  # etcd: the cached $ETCD_VERSION build under the tag kubeadm asks for (kubeadm pins an etcd per
  # Kubernetes minor; any 3.6 server speaks the same API). Tagging it keeps the kind config free of an
  # etcd image override.
  echo "file usr/local/bin/etcd $k8s/etcd 0755" > "$WORK/etcd.spec"
  oci etcd "$etcd_ref" "$WORK/etcd.spec" --label "org.opencontainers.image.version=$ETCD_VERSION"
  echo "file coredns $(cat "$WORK/coredns") 0755" > "$WORK/coredns.spec"
  oci coredns "$coredns_ref" "$WORK/coredns.spec" --entrypoint '["/coredns"]'
  # pause: the project's static pause program.
  gcc -static -Os -o "$WORK/pause" "$LAB_ROOT/scripts/images/pause.c" && strip "$WORK/pause"
  echo "file pause $WORK/pause 0755" > "$WORK/pause.spec"
  oci pause "$pause_ref" "$WORK/pause.spec" --entrypoint '["/pause"]' --user 65535:65535
  # kube-proxy (iptables mode; this kernel has no IPVS): iptables nft and legacy with their extension
  # modules, conntrack, and a shell for the backend-picking wrapper; binaries and libraries from the
  # node's own debootstrap rootfs.
  r="$WORK/proxy-root"
  mkdir -p "$r"
  tar -C "$r" -xf "$ROOTFS_TAR" ./usr ./etc/protocols ./etc/alternatives ./bin ./sbin ./lib ./lib64
  spec="$WORK/kube-proxy.spec"
  { merged_usr_links; echo "file usr/local/bin/kube-proxy $k8s/kube-proxy 0755"; } > "$spec"
  for b in /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi /usr/sbin/conntrack /usr/bin/dash /usr/bin/grep /usr/bin/ln; do
    add_from_rootfs "$spec" "$r" "$b"
  done
  # The extension modules iptables loads at run time, and the libraries they load (libm for statistic,
  # the random load balancing of Services with several endpoints).
  find "$r/usr/lib/x86_64-linux-gnu/xtables" -name '*.so' -printf 'file usr/lib/x86_64-linux-gnu/xtables/%f %p\n' >> "$spec"
  for b in $(chroot "$r" sh -c 'ldd /usr/lib/x86_64-linux-gnu/xtables/*.so' | awk '/=> \// {print $3} /^\t\// {print $1}' | sort -u); do
    add_path "$spec" "$r" "$b"
  done
  echo "file etc/protocols $r/etc/protocols 0644" >> "$spec"
  echo "symlink usr/bin/sh dash" >> "$spec"
  echo "file usr/sbin/iptables-wrapper $KIND_DIR/node/iptables-wrapper 0755" >> "$spec"
  for b in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    echo "symlink usr/sbin/$b iptables-wrapper" >> "$spec"
  done
  for b in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    echo "symlink usr/sbin/${b/tables/tables-nft} xtables-nft-multi" >> "$spec"
    echo "symlink usr/sbin/${b/tables/tables-legacy} xtables-legacy-multi" >> "$spec"
  done
  oci kube-proxy "registry.k8s.io/kube-proxy:$K8S_VERSION" "$spec"
  rm -rf "$r"
  # Every image kubeadm lists is built (its pause tag is replaced by containerd's, as kind does).
  local want
  for want in $(grep -v '/pause:' <<<"$required"); do
    grep -q " $want\$" "$WORK/images.list" || { echo "kubeadm wants $want, which is not built" >&2; return 1; }
  done
}

# --- 3. node image --------------------------------------------------------------------------------
bx() { docker_ exec "$BUILD_CONTAINER" "$@"; }

assemble() {
  local base=$1 hash=$2 k8s b name ref
  k8s=$(cat "$WORK/k8s-dir")
  quiet docker_ run -d --name "$BUILD_CONTAINER" --entrypoint=sleep --security-opt seccomp=unconfined \
    "$base" infinity
  for b in kubeadm kubelet kubectl; do
    docker_ cp "$k8s/$b" "$BUILD_CONTAINER:/usr/bin/$b"
    bx chown root:root "/usr/bin/$b"
    bx chmod 0755 "/usr/bin/$b"
  done
  bx sh -c "echo $K8S_VERSION > /kind/version"
  bx mkdir -p /kind/manifests /kind/images
  docker_ cp "$KIND_DIR/node/default-cni.yaml" "$BUILD_CONTAINER:/kind/manifests/default-cni.yaml"
  # containerd inside the build container, only long enough to import the images (kind's importer).
  bx sh -c 'containerd >/var/log/containerd-build.log 2>&1 & echo $! > /run/containerd-build.pid'
  bx sh -c 'for i in $(seq 1 60); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.5; done; cat /var/log/containerd-build.log; exit 1'
  while read -r name ref; do
    docker_ cp "$IMAGES/$name.oci.tar" "$BUILD_CONTAINER:/kind/images/$name.tar"
    bx ctr -n k8s.io images import --label=io.cri-containerd.pinned=pinned --no-unpack "/kind/images/$name.tar" >/dev/null
    grep -qxF "$ref" <<<"$(bx ctr -n k8s.io images ls -q)" || { echo "$ref not in containerd after import" >&2; return 1; }
  done < "$WORK/images.list"
  # Stopped by its PID; it stays a zombie (the container's init, sleep, reaps nothing) once it has exited.
  bx sh -c 'p=$(cat /run/containerd-build.pid); kill "$p"; while [ -d "/proc/$p" ] && ! grep -q "^State:.*Z" "/proc/$p/status"; do sleep 0.2; done; rm -f /run/containerd-build.pid /var/log/containerd-build.log'
  docker_ commit \
    --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
    --change "LABEL straggler-lab.node-inputs=$hash" \
    "$BUILD_CONTAINER" "$NODE_IMAGE" >/dev/null
  docker_ rm -f -v "$BUILD_CONTAINER" >/dev/null
}

save_archive() {
  local hash=$1
  docker_ save -o "$ARCHIVE.tmp" "$NODE_IMAGE"
  mv "$ARCHIVE.tmp" "$ARCHIVE"
  echo "$hash" > "$ARCHIVE.inputs"
}

image_hash() { docker_ image inspect -f '{{ index .Config.Labels "straggler-lab.node-inputs" }}' "$NODE_IMAGE" 2>/dev/null; }

main() {
  engine_up || { echo "the private engine is not running: scripts/env/kind/engine.sh up" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] || { echo "the node image build needs root (debootstrap, chroot)" >&2; exit 1; }
  mkdir -p "$NODE_CACHE"
  local hash base
  say "kind node image $NODE_IMAGE"
  step "kind $KIND_VERSION base files (Go module)" kind_source
  step "debootstrap bookworm minbase ($(basename "$ROOTFS_TAR"))" debootstrap_rootfs
  base="straggler-lab/kind-base:bookworm-$(base_hash)"
  if [ "${1:-}" = base ]; then
    step "base image $base (kind base files, docker import)" base_image "$base"
    return 0
  fi
  step "Kubernetes $K8S_VERSION binaries (scripts/env/k8s-node/build.sh)" k8s_binaries
  step "CoreDNS $COREDNS_VERSION binary" coredns_binary
  hash=$(inputs_hash)
  if [ "$(image_hash)" = "$hash" ]; then
    ok "node image up to date in the engine" "0.0s"
  elif [ -f "$ARCHIVE" ] && [ "$(cat "$ARCHIVE.inputs" 2>/dev/null)" = "$hash" ]; then
    step "node image loaded from $ARCHIVE" docker_ load -q -i "$ARCHIVE"
  else
    step "base image $base (kind base files, docker import)" base_image "$base"
    step "component images (apiserver, controller-manager, scheduler, proxy, etcd, coredns, pause)" component_images
    step "node image assembled (binaries, /kind/version, images imported, docker commit)" assemble "$base" "$hash"
    docker_ rmi "$base" >/dev/null 2>&1 || true
    # The image this build replaced (untagged now) and the base's build layers: the data root is a cache.
    docker_ image prune -f >/dev/null
    step "node image saved to $ARCHIVE" save_archive "$hash"
  fi
  [ -f "$ARCHIVE" ] && [ "$(cat "$ARCHIVE.inputs" 2>/dev/null)" = "$hash" ] \
    || step "node image saved to $ARCHIVE" save_archive "$hash"
  echo "$NODE_IMAGE $ARCHIVE"
}

main "$@"
