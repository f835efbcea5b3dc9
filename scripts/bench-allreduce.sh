#!/usr/bin/env bash
# All-reduce algorithm bandwidth of the lab's ring (the one lab-rank uses) beside OpenMPI's MPI_Allreduce
# over its TCP transport, both with the same number of ranks on loopback, measured in the same run.
#
#   scripts/bench-allreduce.sh            # 4 ranks, 1, 16 and 64 MiB, 3 rounds
#   RANKS=4 SIZES=1,16,64 ROUNDS=5 ITERS=20 scripts/bench-allreduce.sh
#
# Each round runs the lab ring and then OpenMPI (`--mca pml ob1 --mca btl tcp,self`, loopback only); a
# round reports the median of ITERS timed operations per size (after a barrier each), and the script
# prints the median over rounds and the ratio lab / OpenMPI (above 1: the lab's ring is faster). Installs
# Debian's openmpi-bin and libopenmpi-dev when mpicc is missing (needs root).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RANKS=${RANKS:-4}
SIZES=${SIZES:-1,16,64}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}

say() { printf '[bench-allreduce] %s\n' "$*" >&2; }

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  [ "$(id -u)" -eq 0 ] || { say "OpenMPI is missing: sudo apt-get install openmpi-bin libopenmpi-dev"; exit 1; }
  say "installing OpenMPI from Debian (once)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null; }
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
say "compiling the OpenMPI program"
mpicc -O2 -o "$work/mpi_allreduce" "$root/scripts/bench/mpi_allreduce.c"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

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
  say "round $round/$ROUNDS: OpenMPI MPI_Allreduce over TCP"
  mpirun "${mpi_flags[@]}" -np "$RANKS" "$work/mpi_allreduce" "$SIZES" "$ITERS" "$WARMUP" >>"$work/mpi.jsonl"
done

python3 - "$work/lab.jsonl" "$work/mpi.jsonl" "$RANKS" "$ROUNDS" <<'EOF'
import json, statistics, sys
lab = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mpi = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
ranks, rounds = sys.argv[3], sys.argv[4]
print(f"all-reduce, {ranks} ranks on loopback, median of {rounds} rounds (algorithm bandwidth = bytes / time)")
print(f"{'size':>8} {'lab ring':>16} {'OpenMPI tcp':>16} {'lab/OpenMPI':>12}")
for mib in sorted({r['mib'] for r in lab}):
    l = statistics.median(r['median_s'] for r in lab if r['mib'] == mib)
    m = statistics.median(r['median_s'] for r in mpi if r['mib'] == mib)
    bw = lambda t: mib * (1 << 20) / t / 1e6
    print(f"{str(mib) + ' MiB':>8} {bw(l):>9.0f} MB/s {bw(m):>9.0f} MB/s {m / l:>11.2f}x"
          f"   ({l * 1e3:.1f} ms vs {m * 1e3:.1f} ms)")
EOF
