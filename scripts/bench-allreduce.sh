#!/usr/bin/env bash
# All-reduce algorithm bandwidth of the lab's ring (the one lab-rank uses) beside OpenMPI's MPI_Allreduce
# over its TCP transport and torch.distributed's gloo backend, all with the same number of ranks on
# loopback, measured in the same run.
#
#   scripts/bench-allreduce.sh            # 4 ranks, 1, 16 and 64 MiB, 3 rounds, peers OpenMPI and gloo
#   RANKS=4 SIZES=1,16,64 ROUNDS=5 ITERS=20 PEERS=mpi,gloo scripts/bench-allreduce.sh
#
# Each round runs the lab ring, then OpenMPI (`--mca pml ob1 --mca btl tcp,self`, loopback only), then gloo
# (`init_process_group("gloo")`, GLOO_SOCKET_IFNAME=lo, one thread per rank); a round reports the median of
# ITERS timed operations per size (after a barrier each), and the script prints the median over rounds and
# the ratios lab / peer (above 1: the lab's ring is faster). Installs Debian's openmpi-bin and
# libopenmpi-dev when mpicc is missing (needs root), and torch into .tools/torch-venv through
# scripts/tools.sh when it does not import (LAB_TORCH_PYTHON names another Python with torch); without
# torch the gloo peer is left out with a warning.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RANKS=${RANKS:-4}
SIZES=${SIZES:-1,16,64}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-10}
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

say "building the lab ring benchmark (release)"
(cd "$root" && cargo build -q --release -p lab-workloads --example bench_allreduce)
lab_bin="$root/target/release/examples/bench_allreduce"
if want_peer mpi; then
  say "compiling the OpenMPI program"
  mpicc -O2 -o "$work/mpi_allreduce" "$root/scripts/bench/mpi_allreduce.c"
fi
: >"$work/mpi.jsonl"
: >"$work/gloo.jsonl"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# shellcheck disable=SC2054  # 'tcp,self' is one MCA value, not two elements
mpi_flags=(--oversubscribe --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)

for round in $(seq 1 "$ROUNDS"); do
  say "round $round/$ROUNDS: lab ring, $RANKS ranks, $SIZES MiB"
  port=$(free_port)
  pids=()
  for r in $(seq 0 $((RANKS - 1))); do
    "$lab_bin" --rank "$r" --world "$RANKS" --rendezvous "127.0.0.1:$port" --mib "$SIZES" --iters "$ITERS" \
      --warmup "$WARMUP" >>"$work/lab.jsonl" &
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
        --world "$RANKS" --port "$port" --mib "$SIZES" --iters "$ITERS" --warmup "$WARMUP" >>"$work/gloo.jsonl" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    pids=()
  fi
done

python3 - "$work/lab.jsonl" "$work/mpi.jsonl" "$work/gloo.jsonl" "$RANKS" "$ROUNDS" <<'EOF'
import json, statistics, sys
load = lambda path: [json.loads(l) for l in open(path) if l.strip()]
lab = load(sys.argv[1])
peers = [(name, rows) for name, rows in (("OpenMPI tcp", load(sys.argv[2])), ("gloo", load(sys.argv[3]))) if rows]
ranks, rounds = sys.argv[4], sys.argv[5]
print(f"all-reduce, {ranks} ranks on loopback, median of {rounds} rounds (algorithm bandwidth = bytes / time)")
print(f"{'size':>8} {'lab ring':>16}" + "".join(f" {n:>16}" for n, _ in peers)
      + "".join(f" {'lab/' + n.split()[0]:>12}" for n, _ in peers))
for mib in sorted({r['mib'] for r in lab}):
    med = lambda rows: statistics.median(r['median_s'] for r in rows if r['mib'] == mib)
    bw = lambda t: mib * (1 << 20) / t / 1e6
    l = med(lab)
    p = [med(rows) for _, rows in peers]
    print(f"{str(mib) + ' MiB':>8} {bw(l):>11.0f} MB/s" + "".join(f" {bw(t):>11.0f} MB/s" for t in p)
          + "".join(f" {t / l:>11.2f}x" for t in p)
          + f"   ({l * 1e3:.1f} ms" + "".join(f" vs {n} {t * 1e3:.1f} ms" for (n, _), t in zip(peers, p)) + ")")
EOF
