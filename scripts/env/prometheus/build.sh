#!/usr/bin/env bash
# Builds Prometheus 3 (the server and promtool) from the Go module proxy, for machines that cannot pull
# its image: the kind tier runs this server in the cluster, and the rule file is tested with this promtool
# beside Debian's (2.42). Prometheus publishes its Go module as github.com/prometheus/prometheus v0.3xx.y
# for release 3.xx.y; v0.305.0 is 3.5.0, the release of the image a connected machine pulls by default
# (prom/prometheus:v3.5.0). The module is built as its own main module (a copy of its source, so that its
# go.mod's replace and exclude lines apply), without the web UI's compiled assets: the API, the rules and
# the scraping are the same; the UI pages are not served. The result is cached in a versioned directory
# outside the checkout and reused.
#
#   scripts/env/prometheus/build.sh          build (or reuse) and print the binary directory
#   eval "$(scripts/env/prometheus/build.sh --env)"   ... and put it first on PATH
#
# Environment: LAB_CACHE (default ~/.cache/straggler-lab), PROMETHEUS_VERSION (3.5.0).
set -euo pipefail

PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-3.5.0}
major=${PROMETHEUS_VERSION%%.*}
rest=${PROMETHEUS_VERSION#*.}
minor=${rest%%.*}
patch=${rest#*.}
[ "$major" = 3 ] && [ -n "$minor" ] && [ -n "$patch" ] \
  || { echo "PROMETHEUS_VERSION=$PROMETHEUS_VERSION: this builds a 3.x release (e.g. 3.5.0)" >&2; exit 2; }
MODULE_VERSION=$(printf 'v0.3%02d.%s' "$minor" "$patch")
CACHE=${LAB_CACHE:-$HOME/.cache/straggler-lab}
OUT="$CACHE/prometheus-$PROMETHEUS_VERSION/bin"
start=$(date +%s)
log() { printf '[prometheus-build %s +%ss] %s\n' "$(date -u +%H:%M:%S)" "$(( $(date +%s) - start ))" "$*" >&2; }

print() {
  if [ "${1:-}" = --env ]; then echo "export PATH=\"$OUT:\$PATH\""; else echo "$OUT"; fi
}
complete() { [ -x "$OUT/prometheus" ] && [ -x "$OUT/promtool" ]; }

if complete; then
  log "reusing Prometheus $PROMETHEUS_VERSION in $OUT"
  print "${1:-}"
  exit 0
fi
command -v go >/dev/null || { log "go is not installed: install Go 1.23 or newer"; exit 1; }
mkdir -p "$OUT"
exec 9>"$OUT/../build.lock"
if ! flock -n 9; then
  log "another build of this version is running; waiting for it"
  flock 9
  if complete; then print "${1:-}"; exit 0; fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/lab-prometheus-build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

log "downloading github.com/prometheus/prometheus@$MODULE_VERSION (Prometheus $PROMETHEUS_VERSION)"
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus/prometheus@$MODULE_VERSION" \
  | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -d "$dir" ] || { log "could not download github.com/prometheus/prometheus@$MODULE_VERSION"; exit 1; }
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
cd "$work/src"
got=$(cat VERSION)
[ "$got" = "$PROMETHEUS_VERSION" ] || { log "the module's VERSION says $got, not $PROMETHEUS_VERSION"; exit 1; }
# What Prometheus' own build (promu) sets: without it both binaries report an empty version.
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=$PROMETHEUS_VERSION -X $v.Revision=$MODULE_VERSION -X $v.Branch=module"
ldflags+=" -X $v.BuildUser=straggler-lab -X $v.BuildDate=19700101-00:00:00"
for b in promtool prometheus; do
  log "go build $b"
  t0=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -tags netgo -ldflags "$ldflags" -o "$OUT/$b.tmp" "./cmd/$b"
  case "$("$OUT/$b.tmp" --version 2>&1 | sed -n 1p)" in
    *"version $PROMETHEUS_VERSION "*) ;;
    *) log "$b does not report version $PROMETHEUS_VERSION: the version ldflags did not apply"; exit 1 ;;
  esac
  mv "$OUT/$b.tmp" "$OUT/$b"
  printf '%s %s %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$b" "$(( $(date +%s) - t0 ))" >> "$OUT/../build-times.log"
done
log "done: $OUT"
print "${1:-}"
