#!/usr/bin/env bash
# Builds the lab's container images offline, without Docker or a registry, as OCI image archives that
# `ctr -n k8s.io images import` accepts:
#
#   pause   straggler-lab/pause:1.0     a tiny static C program: the pod sandbox process
#   lab     straggler-lab/lab:<version> the workspace's lab-* binaries (cargo build --release), the
#                                       libraries they link (copied from this host), weed (SeaweedFS),
#                                       tc from iproute2 with its libraries, and busybox (sh, wget, nc,
#                                       httpd...; its wget -T crashes: use `timeout N wget`)
#
#   scripts/images/build.sh [pause|lab|all]     (default: all)
#
# Prints one line per image on stdout: "<reference> <archive> <manifest digest> <reference as containerd
# stores it>". Pods use the short reference with imagePullPolicy: Never. The archives go to
# ${LAB_CACHE:-~/.cache/straggler-lab}/images. Layers are written deterministically (sorted entries,
# fixed times and owners), so rebuilding the same binaries gives the same digest.
# Environment: LAB_CACHE, LAB_IMAGE_VERSION (default: the workspace version), LAB_WEED.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
CACHE=${LAB_CACHE:-$HOME/.cache/straggler-lab}
OUT="$CACHE/images"
PAUSE_REF=straggler-lab/pause:1.0

log() { printf '[images] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

workspace_version() {
  python3 - "$root/Cargo.toml" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print(tomllib.load(f)["workspace"]["package"]["version"])
EOF
}

# add_with_libs <spec> <dest-dir> <binary>: the binary plus every shared library it loads, at the
# same paths as on this host (the dynamic loader finds them in its default multiarch directories).
add_with_libs() {
  local spec=$1 destdir=$2 bin=$3 lib
  echo "file $destdir/$(basename "$bin") $bin 0755" >> "$spec"
  if ldd "$bin" >/dev/null 2>&1; then
    while read -r lib; do
      [ -n "$lib" ] && echo "file $lib $lib 0755" >> "$spec"
    done < <(ldd "$bin" | awk '/=> \// {print $3} /^\t\// {print $1}')
  fi
}

build_pause() {
  command -v gcc >/dev/null || die "gcc is missing: apt-get install gcc libc6-dev"
  local work spec digest
  work=$(mktemp -d "${TMPDIR:-/tmp}/lab-pause.XXXXXX")
  gcc -static -Os -Wall -Wextra -Werror -o "$work/pause" "$here/pause.c"
  strip "$work/pause"
  spec="$work/spec"
  echo "file pause $work/pause 0755" > "$spec"
  digest=$(python3 "$here/oci-image.py" --spec "$spec" --name "$PAUSE_REF" --out "$OUT/pause.oci.tar" \
    --entrypoint '["/pause"]' --user 65535:65535 --label org.opencontainers.image.title=straggler-lab-pause)
  rm -rf "$work"
  log "pause image $PAUSE_REF $digest"
  echo "$PAUSE_REF $OUT/pause.oci.tar $digest $(python3 "$here/oci-image.py" --normalize "$PAUSE_REF")"
}

# The lab-* binaries of the workspace (the `lab` CLI itself stays on the host).
lab_binaries() {
  (cd "$root" && cargo metadata --no-deps --format-version 1) | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(m["target_directory"])
for p in m["packages"]:
    for t in p["targets"]:
        if "bin" in t["kind"] and t["name"].startswith("lab-"):
            print(t["name"])'
}

build_lab() {
  local version ref work spec digest target bins=() built=() b busybox weed
  version=${LAB_IMAGE_VERSION:-$(workspace_version)}
  ref="straggler-lab/lab:$version"
  mapfile -t lines < <(lab_binaries)
  target=${lines[0]}
  bins=("${lines[@]:1}")
  [ ${#bins[@]} -gt 0 ] || die "the workspace has no lab-* binaries to put in the image"
  log "cargo build --release: ${bins[*]}"
  local args=()
  for b in "${bins[@]}"; do args+=(--bin "$b"); done
  if (cd "$root" && cargo build --release "${args[@]}" >&2); then
    built=("${bins[@]}")
  else
    # Some crates are still being written; one that does not compile must not stop the others.
    log "building all together failed; building each binary on its own"
    for b in "${bins[@]}"; do
      if (cd "$root" && cargo build --release --bin "$b" >&2); then built+=("$b"); else log "✗ $b does not build: left out of the image"; fi
    done
  fi
  [ ${#built[@]} -gt 0 ] || die "none of the lab binaries builds"

  weed=${LAB_WEED:-}
  if [ -z "$weed" ]; then eval "$("$root/scripts/tools.sh" weed)"; weed=$LAB_WEED; fi
  [ -x "$weed" ] || die "weed not found: run scripts/tools.sh weed"
  # Debian's dynamic busybox, not busybox-static: the static build's shell runs its own applets before
  # anything on PATH, so `tc` in a script would be busybox's tc (no netem), not iproute2's.
  busybox=$(command -v busybox || true)
  if [ -z "$busybox" ]; then
    [ "$(id -u)" -eq 0 ] || die "busybox is missing: sudo apt-get install busybox"
    log "installing busybox from Debian (once)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends busybox >/dev/null
    busybox=$(command -v busybox)
  fi
  command -v tc >/dev/null || die "tc is missing: apt-get install iproute2"

  work=$(mktemp -d "${TMPDIR:-/tmp}/lab-image.XXXXXX")
  spec="$work/spec"
  : > "$spec"
  for b in "${built[@]}"; do add_with_libs "$spec" /usr/local/bin "$target/release/$b"; done
  add_with_libs "$spec" /usr/local/bin "$weed"
  add_with_libs "$spec" /sbin "$(command -v tc)"
  # tc's delay distribution tables (netem "distribution" option) and its protocol names.
  for f in /usr/lib/x86_64-linux-gnu/tc/*.dist /etc/iproute2/*; do [ -f "$f" ] && echo "file $f $f 0644" >> "$spec"; done
  add_with_libs "$spec" /bin "$busybox"
  for a in sh cat ls sleep wget nc env echo printf test ps kill mkdir rm cp mv ln ip id hostname head tail grep sed awk \
      cut tr wc sort seq date timeout true false httpd nslookup df du find xargs touch; do
    echo "symlink bin/$a busybox" >> "$spec"
  done
  {
    echo "dir tmp 1777"
    echo "dir data 0755"
    echo "dir etc 0755"
  } >> "$spec"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$work/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$work/group"
  echo "file etc/passwd $work/passwd 0644" >> "$spec"
  echo "file etc/group $work/group 0644" >> "$spec"
  digest=$(python3 "$here/oci-image.py" --spec "$spec" --name "$ref" --out "$OUT/lab-$version.oci.tar" \
    --cmd '["weed","version"]' --workdir /data \
    --label org.opencontainers.image.title=straggler-lab --label "org.opencontainers.image.version=$version" \
    --label "straggler-lab.binaries=${built[*]}")
  rm -rf "$work"
  log "lab image $ref $digest (binaries: ${built[*]}, weed, tc, busybox)"
  echo "$ref $OUT/lab-$version.oci.tar $digest $(python3 "$here/oci-image.py" --normalize "$ref")"
}

what=${1:-all}
mkdir -p "$OUT"
case "$what" in
  pause) build_pause ;;
  lab) build_lab ;;
  all) build_pause; build_lab ;;
  *) die "unknown image '$what' (pause, lab or all)" ;;
esac
