#!/usr/bin/env bash
# All-reduce time of the lab's all-reduce (the one lab-rank uses, algorithm chosen by size) beside
# OpenMPI's MPI_Allreduce over its TCP transport and torch.distributed's gloo backend, all with the same
# number of ranks on loopback, measured in the same run, from 4 KiB (the job's own 32 KiB included) to
# 64 MiB.
#
#   scripts/bench/allreduce.sh            # 4 ranks, 4 KiB .. 64 MiB, 5 rounds, peers OpenMPI and gloo
#   RANKS=4 SIZES=4,32,256,1024,16384,65536 ROUNDS=5 ITERS=15 PEERS=mpi,gloo scripts/bench/allreduce.sh
#   ALGORITHM=ring SIZES=32 PEERS=mpi scripts/bench/allreduce.sh   # force one of the lab's algorithms
#
# SIZES are in KiB. Each round runs the lab, then OpenMPI (`--mca pml ob1 --mca btl tcp,self`, loopback
# only), then gloo (`init_process_group("gloo")`, GLOO_SOCKET_IFNAME=lo, one thread per rank), so the
# peers are interleaved with the lab and share its noise; a round reports the median of ITERS timed
# operations per size (after a barrier each). The script prints, per size, the median over rounds and the
# range (fastest and slowest round) of each, and the ratios peer time / lab time (above 1: the lab is
# faster), with the load average before and after. Installs Debian's openmpi-bin and
# libopenmpi-dev when mpicc is missing (needs root), and torch into .tools/torch-venv through
# scripts/tools.sh when it does not import (LAB_TORCH_PYTHON names another Python with torch); without
# torch the gloo peer is left out with a warning.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RANKS=${RANKS:-4}
SIZES=${SIZES:-4,32,256,1024,16384,65536}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-15}
ALGORITHM=${ALGORITHM:-}
WARMUP=${WARMUP:-2}
PEERS=${PEERS:-mpi,gloo}

want_peer() { case ",$PEERS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

say() { printf '[bench-allreduce] %s\n' "$*" >&2; }

if want_peer mpi && { ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; }; then
  [ "$(id -u)" -eq 0 ] || { say "OpenMPI is missing: sudo apt-get install openmpi-bin libopenmpi-dev"; exit 1; }
  say "installing OpenMPI from Debian (once)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null; }
fi

torch_python=
if want_peer gloo; then
  torch_python=${LAB_TORCH_PYTHON:-$root/.tools/torch-venv/bin/python}
  if ! "$torch_python" -c 'import torch' >/dev/null 2>&1; then
    torch_python=$root/.tools/torch-venv/bin/python
    "$root/scripts/tools.sh" torch >/dev/null || true
  fi
  if ! "$torch_python" -c 'import torch' >/dev/null 2>&1; then
    say "torch does not import with $torch_python: leaving gloo out (scripts/tools.sh torch installs it)"
    torch_python=
  fi
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

say "building the lab all-reduce benchmark (release)"
(cd "$root" && cargo build -q --release -p lab-workloads --example bench_allreduce)
lab_bin="$root/target/release/examples/bench_allreduce"
if want_peer mpi; then
  say "compiling the OpenMPI program"
  mpicc -O2 -o "$work/mpi_allreduce" "$root/scripts/bench/mpi_allreduce.c"
fi
: >"$work/mpi.jsonl"
: >"$work/gloo.jsonl"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

lab_flags=()
[ -n "$ALGORITHM" ] && lab_flags+=(--algorithm "$ALGORITHM")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# shellcheck disable=SC2054  # 'tcp,self' is one MCA value, not two elements
mpi_flags=(--oversubscribe --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)

for round in $(seq 1 "$ROUNDS"); do
  say "round $round/$ROUNDS: lab, $RANKS ranks, $SIZES KiB"
  port=$(free_port)
  pids=()
  for r in $(seq 0 $((RANKS - 1))); do
    "$lab_bin" --rank "$r" --world "$RANKS" --rendezvous "127.0.0.1:$port" --kib "$SIZES" --iters "$ITERS" \
      --warmup "$WARMUP" "${lab_flags[@]}" >>"$work/lab.jsonl" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
  if want_peer mpi; then
    say "round $round/$ROUNDS: OpenMPI MPI_Allreduce over TCP"
    mpirun "${mpi_flags[@]}" -np "$RANKS" "$work/mpi_allreduce" "$SIZES" "$ITERS" "$WARMUP" >>"$work/mpi.jsonl"
  fi
  if [ -n "$torch_python" ]; then
    say "round $round/$ROUNDS: torch.distributed all_reduce over gloo"
    port=$(free_port)
    for r in $(seq 0 $((RANKS - 1))); do
      GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 "$torch_python" "$root/scripts/bench/gloo_allreduce.py" --rank "$r" \
        --world "$RANKS" --port "$port" --kib "$SIZES" --iters "$ITERS" --warmup "$WARMUP" >>"$work/gloo.jsonl" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    pids=()
  fi
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$work/lab.jsonl" "$work/mpi.jsonl" "$work/gloo.jsonl" "$RANKS" "$ROUNDS" "$ITERS" "$load_before" "$load_after" <<'EOF'
import json, statistics, sys
load = lambda path: [json.loads(l) for l in open(path) if l.strip()]
lab = load(sys.argv[1])
peers = [(name, rows) for name, rows in (("OpenMPI-tcp", load(sys.argv[2])), ("gloo", load(sys.argv[3]))) if rows]
ranks, rounds, iters, before, after = sys.argv[4:9]
print(f"all-reduce of float32 sums, {ranks} ranks on loopback: per size the median over {rounds} rounds of each "
      f"round's median of {iters} operations [fastest round-slowest round]; ratio = peer time / lab time "
      f"(above 1: the lab is faster). Load average {before} before, {after} after.")
def size(kib):
    return f"{kib // 1024} MiB" if kib >= 1024 else f"{kib} KiB"
def ms(t):
    return f"{t * 1e3:.3f}" if t < 0.01 else f"{t * 1e3:.1f}"
def cell(rows, kib):
    ts = [r["median_s"] for r in rows if r["kib"] == kib]
    if not ts:
        return None, "-"
    m = statistics.median(ts)
    return m, f"{ms(m)} ms [{ms(min(ts))}-{ms(max(ts))}]"
print(f"{'size':>7}  {'lab (algorithm)':<46}" + "".join(f"  {n:<28}" for n, _ in peers)
      + "".join(f"  {'vs ' + n:>14}" for n, _ in peers))
worst = {n: None for n, _ in peers}
for kib in sorted({r["kib"] for r in lab}):
    l, ltext = cell(lab, kib)
    alg = next(r.get("algorithm", "?") for r in lab if r["kib"] == kib)
    line = f"{size(kib):>7}  {ltext + ' (' + alg + ')':<46}"
    ratios = []
    for n, rows in peers:
        p, ptext = cell(rows, kib)
        line += f"  {ptext:<28}"
        ratios.append((n, p / l if p else None))
    for n, r in ratios:
        line += f"  {(f'{r:.2f}x' if r else '-'):>14}"
        if r and (worst[n] is None or r < worst[n][0]):
            worst[n] = (r, kib)
    print(line)
for n, w in worst.items():
    if w:
        print(f"lowest ratio vs {n}: {w[0]:.2f}x at {size(w[1])}")
EOF
