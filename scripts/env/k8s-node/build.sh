#!/usr/bin/env bash
# Builds the Kubernetes node binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy, and kubeadm and kubectl for the kind node image) from the Go module proxy, with
# k8s.io/kubernetes as a dependency, and etcd from go.etcd.io/etcd/server/v3. One build of each binary
# serves both the bare single-node tier and the kind node image (scripts/env/kind/node-image.sh). The result
# is cached in a versioned directory outside the checkout and reused
# when complete; when only some binaries are missing, only those are built.
#
#   scripts/env/k8s-node/build.sh          build (or reuse) and print the binary directory
#
# Environment: LAB_CACHE (default ~/.cache/straggler-lab), K8S_VERSION, ETCD_VERSION.
# Each build step is timed and appended to <cache>/k8s-.../build-times.log, so the cost of a cold build
# can be read back later.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE=${LAB_CACHE:-$HOME/.cache/straggler-lab}
BASE="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
OUT="$BASE/bin"
TIMES="$BASE/build-times.log"
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubeadm kubectl)
BINARIES=("${K8S_BINARIES[@]}" etcd)
start=$(date +%s)

log() { printf '[k8s-build %s +%ss] %s\n' "$(date -u +%H:%M:%S)" "$(( $(date +%s) - start ))" "$*" >&2; }
record() { # record <what> <seconds>
  printf '%s %s %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$1" "$2" >> "$TIMES"
}

# version_of <binary>: the first line of its version output (kubeadm and kubectl have no --version flag).
# The first line of what a binary says its version is. `sed -n 1p` reads to the end: with `head -n 1`, a
# binary that prints a second line after head left dies of SIGPIPE, and under pipefail the build stopped
# there without a word (seen with kubectl, which prints its Kustomize version second).
version_of() {
  case "${1##*/}" in
    kubeadm.tmp|kubeadm) "$1" version -o short 2>&1 | sed -n 1p ;;
    kubectl.tmp|kubectl) "$1" version --client 2>&1 | sed -n 1p ;;
    *) "$1" --version 2>&1 | sed -n 1p ;;
  esac
}

complete() {
  local b
  for b in "${BINARIES[@]}"; do [ -x "$OUT/$b" ] || return 1; done
}

k8s_complete() {
  local b
  for b in "${K8S_BINARIES[@]}"; do [ -x "$OUT/$b" ] || return 1; done
}

if complete; then
  log "reusing cached binaries in $OUT"
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed: install Go 1.24 or newer"; exit 1; }
mkdir -p "$OUT"
# Two builds into the same cache would race on the .tmp files: the second one waits for the first.
exec 9>"$BASE/build.lock"
if ! flock -n 9; then
  log "another build of this version is running; waiting for it"
  flock 9
  if complete; then log "reusing cached binaries in $OUT"; echo "$OUT"; exit 0; fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/lab-k8s-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- Kubernetes ---------------------------------------------------------------------------------
if ! k8s_complete; then
  log "building Kubernetes $K8S_VERSION (staging modules $STAGING_VERSION); a cold build takes 30-45 minutes"
  mkdir -p "$work/k8s" && cd "$work/k8s"
  go mod init lab.local/k8sbuild >/dev/null 2>&1
  t0=$(date +%s)
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION"; exit 1; }
  # Every staging module is replaced by ./staging/... inside kubernetes' own go.mod; as a dependency each
  # needs a replace pinned to the matching published version.
  staging=$(grep -oE 'k8s\.io/[A-Za-z0-9._-]+ => \./staging' "$gomod" | awk '{print $1}' | sort -u)
  {
    echo "module lab.local/k8sbuild"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m $STAGING_VERSION"; done
    echo ")"
  } > go.mod
  log "$(echo "$staging" | wc -l) staging modules pinned to $STAGING_VERSION"
  pkgs=()
  for b in "${K8S_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  if ! go get "${pkgs[@]/%/@$K8S_VERSION}" >&2; then
    log "go get of the command packages failed; retrying with the module alone"
    go get "k8s.io/kubernetes@$K8S_VERSION" >&2
  fi
  record "modules(k8s)" "$(( $(date +%s) - t0 ))"
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  # The same variables hack/lib/version.sh sets; without them every binary reports v0.0.0-master and the
  # kubelet registers with that version.
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  for p in "${pkgs[@]}"; do
    name=${p##*/}
    [ -x "$OUT/$name" ] && continue
    log "go build $name"
    t0=$(date +%s)
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$OUT/$name.tmp" "$p"
    got=$(version_of "$OUT/$name.tmp")
    case "$got" in
      *"$K8S_VERSION"*) ;;
      *) log "$name reports '$got', expected $K8S_VERSION: the version ldflags did not apply"; exit 1 ;;
    esac
    mv "$OUT/$name.tmp" "$OUT/$name"
    record "$name" "$(( $(date +%s) - t0 ))"
  done
fi

# --- etcd ---------------------------------------------------------------------------------------
if [ ! -x "$OUT/etcd" ]; then
  log "building etcd $ETCD_VERSION"
  t0=$(date +%s)
  mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init lab.local/etcdbuild >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  # etcd's version is a constant; only the commit is a build-time variable.
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
    -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$OUT/etcd.tmp" "$OUT/etcd"
  record etcd "$(( $(date +%s) - t0 ))"
fi

complete || { log "build finished but binaries are missing in $OUT"; exit 1; }
record "total(this run)" "$(( $(date +%s) - start ))"
log "done: $OUT"
echo "$OUT"
