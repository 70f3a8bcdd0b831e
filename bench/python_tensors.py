#!/usr/bin/python3
"""jobkit's tensor collectives against torch gloo's, on CPU tensors, in the same processes and the
same loop (bench/RESULTS.md, issue 25).

    srun --mpi=pmix -N3 -n6 /usr/bin/python3 bench/python_tensors.py [ITERS [SIZES [DTYPES]]]

PYTHONPATH must reach the module (a build's python/ directory, or an installed jobkit).
ITERS: timed iterations of each (op, size, dtype, impl), after ITERS // 5 + 1 untimed ones (default 20);
an operation the implementation refuses (torch 1.13's gloo reduces no bfloat16) gets a line with its error.
SIZES: comma-separated bytes per rank (default 1024,65536,1048576,16777216,67108864).
DTYPES: float32,bfloat16 (default both).
Ops, jobkit / torch (the process group of jobkit.torch.init_process_group("gloo")):
  all_reduce   jobkit.all_reduce(t)              / dist.all_reduce(t)           (sum)
  broadcast    jobkit.broadcast(t, 0)            / dist.broadcast(t, 0)
  all_gather   jobkit.all_gather_into_tensor(o, t) / dist.all_gather(list, t) (gloo has no
               all_gather_into_tensor in torch 1.13; the list's tensors are views of one buffer)
SIZE is one rank's tensor (all_gather's output is world size times that). Each iteration is timed on
every rank (time.perf_counter_ns) and its time is the slowest rank's; an untimed jobkit barrier
follows each timed call, so no rank runs ahead into the next one. The two implementations alternate
per (op, size, dtype): jobkit first, then torch. Rank 0 prints one JSON object per line with the
median and p90 of those times and the bus bandwidth (NCCL's busbw convention).
"""
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

import jobkit
import jobkit.torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def timed(call, iters: int):
    """The times of the call, or the error it raised on some rank (raised on every rank alike:
    torch 1.13's gloo reduces no bfloat16)."""
    try:
        call()
        failed = ""
    except RuntimeError as e:
        failed = str(e)
    errors = [e for e in jobkit.all_gather_object(failed) if e]
    if errors:
        return errors[0]
    for _ in range(iters // 5):
        call()
        jobkit.barrier()
    times = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
        jobkit.barrier()
    # Iteration i's time is its slowest rank's.
    every = jobkit.all_gather_object(times)
    return [max(rank_times[i] for rank_times in every) / 1000.0 for i in range(iters)]


def bus_factor(op: str, n: int) -> float:
    # NCCL's busbw: all_reduce 2(n-1)/n, all_gather (n-1)/n of the output, broadcast 1.
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n * n, "broadcast": 1.0}[op]


def main() -> int:
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "1024,65536,1048576,16777216,67108864").split(",")]
    dtypes = (sys.argv[3] if len(sys.argv) > 3 else "float32,bfloat16").split(",")
    me = jobkit.identity()
    jobkit.torch.init_process_group("gloo")
    n = me.world_size
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        for size in sizes:
            count = size // torch.tensor([], dtype=dtype).element_size()
            t = torch.full((count,), float(me.rank + 1), dtype=dtype)
            out = torch.empty((n * count,), dtype=dtype)
            parts = list(out.chunk(n))
            calls = {
                "all_reduce": (lambda: jobkit.all_reduce(t), lambda: dist.all_reduce(t)),
                "broadcast": (lambda: jobkit.broadcast(t, 0), lambda: dist.broadcast(t, 0)),
                "all_gather": (lambda: jobkit.all_gather_into_tensor(out, t), lambda: dist.all_gather(parts, t)),
            }
            for op, (jobkit_call, torch_call) in calls.items():
                for impl, call in (("jobkit", jobkit_call), ("torch_gloo", torch_call)):
                    t.fill_(float(me.rank + 1))  # the sums grow (x n per all_reduce) but stay finite over these loops
                    times = timed(call, iters)
                    if isinstance(times, str):
                        if me.rank == 0:
                            print(json.dumps({"bench": "python_tensors", "impl": impl, "op": op, "dtype": dtype_name,
                                              "bytes": size, "ranks": n, "error": times,
                                              "torch": torch.__version__}), flush=True)
                        continue
                    if me.rank == 0:
                        median = statistics.median(times)
                        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
                        print(json.dumps({"bench": "python_tensors", "impl": impl, "op": op, "dtype": dtype_name,
                                          "bytes": size, "ranks": n, "nodes": jobkit.identity().num_nodes,
                                          "iters": iters, "median_us": round(median, 1), "p90_us": round(p90, 1),
                                          "busbw_GBps": round(size * bus_factor(op, n) / median / 1000.0, 3),
                                          "torch": torch.__version__}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
