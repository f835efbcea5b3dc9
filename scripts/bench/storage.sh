#!/usr/bin/env bash
# Reads/s and MB/s of the rank's storage client against one SeaweedFS volume server, beside wrk (a plain
# HTTP load tool) against the same server and the same needle, as a ratio.
#
#   scripts/bench/storage.sh                 # 10 s per case
#   SECONDS_PER_CASE=20 scripts/bench/storage.sh
#
# Starts its own `weed master` and one `weed volume` (rack storage-0) on free loopback ports, seeds a small
# dataset with lab-seeder, and compares, on keep-alive connections:
#   - batch-sized HTTP range reads (256 rows, what a rank does every step), 1 and 4 connections;
#   - whole-shard reads, 1 connection;
#   - and, on its own line, the rank's full read path (range read + decode + per-row checksum).
# Installs wrk from Debian when missing (needs root) and weed via scripts/tools.sh.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SECS=${SECONDS_PER_CASE:-10}
say() { printf '[bench-storage] %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null; then
  [ "$(id -u)" -eq 0 ] || { say "wrk is missing: sudo apt-get install wrk"; exit 1; }
  say "installing wrk from Debian (once)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends wrk >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends wrk >/dev/null; }
fi
eval "$("$root/scripts/tools.sh" weed)"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

say "building lab-seeder and the storage benchmark (release)"
(cd "$root" && cargo build -q --release -p lab-workloads --bin lab-seeder --example bench_storage)
seeder="$root/target/release/lab-seeder"
bench="$root/target/release/examples/bench_storage"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mport=$(free_port); mgrpc=$(free_port); vport=$(free_port); vgrpc=$(free_port)
mkdir -p "$work/master" "$work/volume"
"$LAB_WEED" master -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$mport" -port.grpc="$mgrpc" -mdir="$work/master" \
  -volumeSizeLimitMB=64 >"$work/master.log" 2>&1 &
pids+=($!)
"$LAB_WEED" volume -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$vport" -port.grpc="$vgrpc" -dir="$work/volume" -max=8 \
  -master="127.0.0.1:$mport.$mgrpc" -rack=storage-0 -dataCenter=lab >"$work/volume.log" 2>&1 &
pids+=($!)
master="127.0.0.1:$mport"

say "seeding a dataset on the one volume server"
"$seeder" --master "$master" --ranks 1 --servers 1 --seed 1 --dataset bench --wait 60s >"$work/seed.json"

wrk_run() { # wrk_run <connections> <url> [header]
  local c=$1 url=$2 header=${3:--} t=1
  [ "$c" -gt 1 ] && t=2
  if [ "$header" != "-" ]; then
    wrk -t"$t" -c"$c" -d"${SECS}s" -H "$header" "$url"
  else
    wrk -t"$t" -c"$c" -d"${SECS}s" "$url"
  fi | awk '/Requests\/sec:/ {print $2}'
}

results="$work/results.tsv"
for case in "range 1" "range 4" "whole 1"; do
  set -- $case
  mode=$1 conns=$2
  IFS=$'\t' read -r url header bytes < <("$bench" --master "$master" --dataset bench --mode "$mode" --print-target)
  say "$mode reads, $conns connection(s): lab client, then wrk, ${SECS} s each"
  lab=$("$bench" --master "$master" --dataset bench --mode "$mode" --connections "$conns" --seconds "$SECS")
  lab_rps=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["reads_per_s"])' "$lab")
  wrk_rps=$(wrk_run "$conns" "$url" "$header")
  printf '%s\t%s\t%s\t%s\t%s\n' "$mode" "$conns" "$bytes" "$lab_rps" "$wrk_rps" >>"$results"
done
say "the rank's read path: range read + decode + per-row checksums, 1 connection"
verified=$("$bench" --master "$master" --dataset bench --mode range --verify --connections 1 --seconds "$SECS")

python3 - "$results" "$verified" <<'EOF'
import json, sys
print("storage reads against one weed volume server on loopback, keep-alive connections")
print(f"{'reads':<22} {'conns':>5} {'bytes':>8} {'lab reads/s':>12} {'lab MB/s':>9} {'wrk reads/s':>12} {'wrk MB/s':>9} {'lab/wrk':>8}")
for line in open(sys.argv[1]):
    mode, conns, size, lab, wrk = line.split()
    size, lab, wrk = int(size), float(lab), float(wrk)
    name = "batch range (256 rows)" if mode == "range" else "whole shard"
    print(f"{name:<22} {conns:>5} {size:>8} {lab:>12.0f} {lab*size/1e6:>9.1f} {wrk:>12.0f} {wrk*size/1e6:>9.1f} {lab/wrk:>7.2f}x")
v = json.loads(sys.argv[2])
print(f"{'rank path (+verify)':<22} {v['connections']:>5} {v['bytes_per_read']:>8} {v['reads_per_s']:>12.0f} {v['mb_per_s']:>9.1f}")
EOF
