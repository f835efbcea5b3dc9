#!/usr/bin/env bash
# The training job's step time with each rank under a CPU limit (400m by default, as the lab runs it), and
# what the two slow-component faults do to it: one rank cut to 150m in place, and one storage server
# answering 300 ms late. Prints the baseline step time, the phase split, and each fault's throughput as a
# share of the baseline.
#
#   scripts/bench/step.sh
#   STEPS=400 CPU=400m THROTTLED=150m DELAY_MS=300 scripts/bench/step.sh
#   SCENARIOS= scripts/bench/step.sh        # the baseline only
#
# Starts its own SeaweedFS (master and three volume servers on loopback, each behind the lab's own latency
# proxy, lab-proxy, which is its public URL; the delay is set through the proxy's control API, as the
# slow-storage fault sets it), seeds the dataset, and runs four lab-rank processes (release build, default
# batch and model size unless BATCH / MODEL are set), each in its own CPU cgroup (v1 `cpu` controller or
# v2 `cpu.max`; needs root). Everything it starts is stopped by PID and its cgroups removed at exit.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STEPS=${STEPS:-300}
DELAY_STEPS=${DELAY_STEPS:-40}
CPU=${CPU:-400m}
THROTTLED=${THROTTLED:-150m}
DELAY_MS=${DELAY_MS:-300}
SCENARIOS=${SCENARIOS-throttled slow-storage}
RANKS=4
say() { printf '[bench-step] %s\n' "$*" >&2; }
millis() { local v=$1; case "$v" in *m) echo "${v%m}" ;; *) python3 -c "print(int(float('$v')*1000))" ;; esac; }

eval "$("$root/scripts/tools.sh" weed)"
say "building lab-rank, lab-seeder and lab-proxy (release)"
(cd "$root" && cargo build -q --release -p lab-workloads -p lab-latency-proxy --bins)
rank_bin="$root/target/release/lab-rank"
seeder="$root/target/release/lab-seeder"
proxy_bin="$root/target/release/lab-proxy"

work=$(mktemp -d)
pids=()
proxy_pids=()
cg_root=""
cg_version=""
cleanup() {
  for p in "${pids[@]}" "${proxy_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}" "${proxy_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$cg_root" ]; then
    for d in "$cg_root"/rank-*; do [ -d "$d" ] && rmdir "$d" 2>/dev/null || true; done
    rmdir "$cg_root" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# CPU cgroups, one per rank.
if [ -w /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  cg_version=v1; cg_root=/sys/fs/cgroup/cpu/lab-bench-step-$$
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  cg_version=v2; cg_root=/sys/fs/cgroup/lab-bench-step-$$
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
else
  say "no writable CPU cgroup (v1 /sys/fs/cgroup/cpu or v2 cpu.max): run as root on a host with cgroups"; exit 1
fi
mkdir -p "$cg_root"
[ "$cg_version" = v2 ] && echo +cpu >"$cg_root/cgroup.subtree_control"
set_limit() { # set_limit <rank> <quantity>
  local d="$cg_root/rank-$1" m; m=$(millis "$2")
  mkdir -p "$d"
  if [ "$cg_version" = v1 ]; then
    echo 100000 >"$d/cpu.cfs_period_us"; echo $((m * 100)) >"$d/cpu.cfs_quota_us"
  else
    echo "$((m * 100)) 100000" >"$d/cpu.max"
  fi
}
throttled_s() { # throttled_s <rank>
  local f="$cg_root/rank-$1/cpu.stat"
  awk '/^throttled_time/ {printf "%.2f", $2/1e9} /^throttled_usec/ {printf "%.2f", $2/1e6}' "$f"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mport=$(free_port); mgrpc=$(free_port)
mkdir -p "$work/master"
"$LAB_WEED" master -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$mport" -port.grpc="$mgrpc" -mdir="$work/master" \
  -volumeSizeLimitMB=64 >"$work/master.log" 2>&1 &
pids+=($!)
vports=(); proxy_ports=(); control_ports=()
for i in 0 1 2; do
  vport=$(free_port); vgrpc=$(free_port); pport=$(free_port); cport=$(free_port)
  vports+=("$vport"); proxy_ports+=("$pport"); control_ports+=("$cport")
  mkdir -p "$work/volume-$i"
  "$LAB_WEED" volume -ip=127.0.0.1 -ip.bind=127.0.0.1 -port="$vport" -port.grpc="$vgrpc" -dir="$work/volume-$i" \
    -max=8 -master="127.0.0.1:$mport.$mgrpc" -rack="storage-$i" -dataCenter=lab -publicUrl="127.0.0.1:$pport" \
    >"$work/volume-$i.log" 2>&1 &
  pids+=($!)
  "$proxy_bin" --listen "127.0.0.1:$pport" --upstream "127.0.0.1:$vport" --control "127.0.0.1:$cport" \
    >"$work/proxy-$i.log" 2>&1 &
  proxy_pids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 1 100); do
    curl -sf -m 2 "http://127.0.0.1:${control_ports[$i]}/healthz" >/dev/null && break
    sleep 0.1
  done
  curl -sf -m 2 "http://127.0.0.1:${control_ports[$i]}/healthz" >/dev/null \
    || { cat "$work/proxy-$i.log" >&2; say "lab-proxy of storage-$i did not answer"; exit 1; }
done
set_delay() { # set_delay <server> <delay ms>: through lab-proxy's control API
  curl -sf -m 5 -X PUT -d "{\"delay_ms\":$2,\"jitter_ms\":0}" "http://127.0.0.1:${control_ports[$1]}/delay" >/dev/null \
    || { say "could not set storage-$1's delay"; exit 1; }
}
say "seeding"
"$seeder" --master "127.0.0.1:$mport" --ranks $RANKS --seed 1 --wait 60s >"$work/seed.json"

extra=()
[ -n "${BATCH:-}" ] && extra+=(--batch-size "$BATCH")
[ -n "${MODEL:-}" ] && extra+=(--model-size "$MODEL")

run_job() { # run_job <name> <steps> <cpu of rank 0..3...>; prints one TSV line
  local name=$1 steps=$2; shift 2
  local cpus=("$@") rpids=() rdv; rdv=$(free_port)
  for r in $(seq 0 $((RANKS - 1))); do
    set_limit "$r" "${cpus[$r]}"
    local before; before=$(throttled_s "$r"); echo "$before" >"$work/$name-$r.thr0"
    sh -c 'cg=$1; shift; echo $$ >"$cg/cgroup.procs" && exec "$@"' sh "$cg_root/rank-$r" \
      "$rank_bin" --rank "$r" --world-size $RANKS --master "127.0.0.1:$mport" --rendezvous "127.0.0.1:$rdv" \
      --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --max-steps "$steps" --log-every $((steps / 2)) \
      --checkpoint-every 0 "${extra[@]}" >"$work/$name-$r.json" 2>"$work/$name-$r.log" &
    rpids+=($!); pids+=($!)
  done
  for p in "${rpids[@]}"; do wait "$p" || { say "a rank failed in $name:"; tail -3 "$work/$name-"*.log >&2; exit 1; }; done
  for r in $(seq 0 $((RANKS - 1))); do
    local t0 t1; t0=$(cat "$work/$name-$r.thr0"); t1=$(throttled_s "$r")
    python3 - "$name" "$r" "${cpus[$r]}" "$work/$name-$r.json" "$work/$name-$r.log" "$t0" "$t1" <<'EOF'
import json, re, sys
name, rank, cpu, summary, log, t0, t1 = sys.argv[1:]
s = json.load(open(summary))
last = [l for l in open(log) if re.search(r"rank \d+: step \d+ loss", l)][-1]
ph = dict(re.findall(r"(read|compute|wait|transfer) ([\d.]+) ms", last))
print("\t".join([name, rank, cpu, f"{s['mean_step_ms']:.1f}", ph['read'], ph['compute'], ph['wait'], ph['transfer'],
                 f"{float(t1) - float(t0):.1f}", f"{s['early_mean_loss']:.3f}", f"{s['late_mean_loss']:.3f}",
                 f"{s.get('cpu_ms_per_step') or 0:.1f}", f"{s.get('runqueue_ms_per_step') or 0:.1f}"]))
EOF
  done
}

all_at() { local v=$1; printf '%s ' "$v" "$v" "$v" "$v"; }
results="$work/results.tsv"
say "baseline: $RANKS ranks at $CPU each, $STEPS steps"
# shellcheck disable=SC2046  # one CPU quantity per rank, split on purpose
run_job baseline "$STEPS" $(all_at "$CPU") >>"$results"
if [[ " $SCENARIOS " == *" throttled "* ]]; then
  say "throttled-rank: rank 1 at $THROTTLED, the others at $CPU, $STEPS steps"
  run_job throttled "$STEPS" "$CPU" "$THROTTLED" "$CPU" "$CPU" >>"$results"
fi
if [[ " $SCENARIOS " == *" slow-storage "* ]]; then
  say "slow-storage: storage-1 +${DELAY_MS} ms on every request, $DELAY_STEPS steps"
  set_delay 1 "$DELAY_MS"
  # shellcheck disable=SC2046  # one CPU quantity per rank, split on purpose
  run_job slow-storage "$DELAY_STEPS" $(all_at "$CPU") >>"$results"
fi

python3 - "$results" <<'EOF'
import sys, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[r[0]].append(r)
print("step time of 4 ranks on this machine, each rank in its own CPU cgroup (phases: mean ms per step, 2nd half)")
print(f"{'scenario':<13} {'rank':>4} {'cpu':>6} {'step ms':>8} {'read':>7} {'compute':>8} {'wait':>7} {'xfer':>6} {'throttled s':>11} {'cpu/step':>8} {'runq/step':>9} {'loss':>13}")
for name, rs in by.items():
    for r in rs:
        print(f"{name:<13} {r[1]:>4} {r[2]:>6} {r[3]:>8} {r[4]:>7} {r[5]:>8} {r[6]:>7} {r[7]:>6} {r[8]:>11} {r[11]:>8} {r[12]:>9} {r[9]:>6}→{r[10]:<6}")
base = max(float(r[3]) for r in by["baseline"])
cpu = max(float(r[11]) for r in by["baseline"])
quota = float(by["baseline"][0][2].rstrip("m")) / 1000 if by["baseline"][0][2].endswith("m") else float(by["baseline"][0][2])
runq = max(float(r[12]) for r in by["baseline"])
print(f"\nbaseline step {base:.1f} ms ({1000 / base:.1f} steps/s); CPU {cpu:.1f} ms per step per rank, so at least "
      f"{cpu / quota:.0f} ms per step under a {quota:g}-core limit; waiting for a CPU (other load) {runq:.1f} ms per step")
for name in ("throttled", "slow-storage"):
    if name in by:
        t = max(float(r[3]) for r in by[name])
        print(f"{name:<13} step {t:.1f} ms: throughput {100 * base / t:.0f}% of baseline ({t / base:.2f}x slower)")
EOF
