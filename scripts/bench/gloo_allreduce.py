"""The gloo side of scripts/bench/allreduce.sh: torch.distributed's all_reduce (float32, sum) over the gloo
backend, timed the same way as the lab's ring benchmark and the OpenMPI program: warm-up operations, then
for each timed one a barrier and the all-reduce alone. Rank 0 prints one JSON line per size with the median
time and the algorithm bandwidth.

    python gloo_allreduce.py --rank 0 --world 4 --port 29500 --kib 4,32,1024,65536 --iters 10 --warmup 2
"""
import argparse
import datetime
import json
import os
import sys
import time

# Loopback only, one compute thread per rank (as the lab's ring and the OpenMPI program use).
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True, help="rank 0 hosts the rendezvous on 127.0.0.1:PORT")
    ap.add_argument("--kib", default="4,32,256,1024,16384,65536")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{a.port}",
        rank=a.rank,
        world_size=a.world,
        timeout=datetime.timedelta(seconds=120),
    )
    for kib in (int(s) for s in a.kib.split(",") if s):
        n = kib * 1024 // 4
        pattern = ((torch.arange(n, dtype=torch.int64) + a.rank) % 7).to(torch.float32)
        want = float(sum((n - 1 + r) % 7 for r in range(a.world)))
        t = torch.empty(n, dtype=torch.float32)
        times = []
        for i in range(a.warmup + a.iters):
            t.copy_(pattern)  # all_reduce works in place: every operation starts from the rank's own values
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            took = time.perf_counter() - start
            if t[n - 1].item() != want:
                print(f"rank {a.rank}: wrong sum {t[n - 1].item()} != {want} at {kib} KiB", file=sys.stderr)
                return 1
            if i >= a.warmup:
                times.append(took)
        times.sort()
        median = times[len(times) // 2]
        if a.rank == 0:
            print(json.dumps({
                "impl": "gloo",
                "world": a.world,
                "kib": kib,
                "median_s": round(median, 6),
                "min_s": round(times[0], 6),
                "algbw_mb_s": round(kib * 1024 / median / 1e6, 1),
                "torch": torch.__version__,
            }, separators=(",", ":")), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
