#!/usr/bin/env bash
# Builds the kind CLI from the Go module proxy at a pinned version into a versioned cache folder, once,
# and prints the PATH to use it:
#
#   eval "$(scripts/env/kind/tools.sh)"     then `kind` is the pinned build
#
# kind v0.30.0 is pinned because its node image, cluster config (kubeadm v1beta4) and containerd layout are
# the ones the lab's own node image (scripts/env/kind/node-image.sh, Kubernetes v1.34) is assembled against.
# Environment: LAB_CACHE (default ~/.cache/straggler-lab).
set -euo pipefail

KIND_VERSION=v0.30.0
CACHE=${LAB_CACHE:-$HOME/.cache/straggler-lab}
BIN="$CACHE/kind-$KIND_VERSION/bin"

say() { printf '[kind-tools] %s\n' "$*" >&2; }

if [ ! -x "$BIN/kind" ] || ! "$BIN/kind" version 2>/dev/null | grep -q "kind $KIND_VERSION "; then
  command -v go >/dev/null || { say "go is not installed: install Go 1.24 or newer"; exit 1; }
  say "building kind $KIND_VERSION from the Go module proxy (once, about 30 s)"
  mkdir -p "$BIN"
  t0=$(date +%s)
  # GOBIN installs exactly this binary; -trimpath keeps the build independent of the cache location.
  GOBIN="$BIN" CGO_ENABLED=0 nice -n 10 go install -trimpath "sigs.k8s.io/kind@$KIND_VERSION" >&2
  "$BIN/kind" version | grep -q "kind $KIND_VERSION " || { say "built kind does not report $KIND_VERSION"; exit 1; }
  say "kind $KIND_VERSION built in $(( $(date +%s) - t0 )) s: $BIN/kind"
fi

case ":$PATH:" in *":$BIN:"*) ;; *) PATH="$BIN:$PATH" ;; esac
echo "export PATH=\"$PATH\""
