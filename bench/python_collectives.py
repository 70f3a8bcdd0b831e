#!/usr/bin/python3
"""The Python module's object collectives against torch gloo's, in the same processes, and
jobkit.torch.init_process_group against torch's env:// init (bench/RESULTS.md).

    srun --mpi=pmix -N3 -n12 /usr/bin/python3 bench/python_collectives.py [ITERS [INIT_REPS]]

PYTHONPATH must reach the module (a build's python/ directory, or an installed jobkit).
Ops (ITERS timed iterations each, after ITERS // 10 untimed ones; default 200):
  barrier            jobkit.barrier()                vs dist.barrier()
  broadcast_object   jobkit.broadcast_object(obj)    vs dist.broadcast_object_list([obj])
  all_gather_object  jobkit.all_gather_object(obj)   vs dist.all_gather_object(out, obj)
obj is a small dict (about 80 bytes pickled). Every rank times every iteration
(time.perf_counter_ns); iteration i's time is the slowest rank's; the median and p99 of those are
printed. Rooted ops are followed by an untimed jobkit barrier, so the root cannot run ahead.
init: INIT_REPS (default 3) rounds of jobkit.torch.init_process_group("gloo") then torch's
init_process_group("gloo", init_method="env://") with MASTER_ADDR = rank 0's first data-path
address and a port rank 0 found free, each followed by destroy_process_group(); the time is rank
0's wall time of the call, median over the rounds. Rank 0 prints one JSON object per line.
"""
import json
import math
import os
import socket
import sys
import time

import torch.distributed as dist

import jobkit
import jobkit.torch


def stats(times_ns):
    """Median and p99 (µs) of the per-iteration maximum over ranks."""
    slowest = jobkit.all_reduce(times_ns, "max")
    s = sorted(slowest)
    return s[len(s) // 2] / 1000, s[max(1, math.ceil(0.99 * len(s))) - 1] / 1000


def run(name, impl, op, iters, rooted):
    for _ in range(max(1, iters // 10)):
        op()
        if rooted:
            jobkit.barrier()
    times = []
    jobkit.barrier()
    for _ in range(iters):
        start = time.perf_counter_ns()
        op()
        times.append(time.perf_counter_ns() - start)
        if rooted:
            jobkit.barrier()
    median, p99 = stats(times)
    return {"impl": impl, "op": name, "ranks": jobkit.world_size(), "nodes": jobkit.num_nodes(), "iters": iters,
            "median_us": round(median, 1), "p99_us": round(p99, 1)}


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def init_times(reps):
    """Rank 0's wall time (ms) of each kind of init, median over reps rounds."""
    master = jobkit.broadcast_object(jobkit._jobkit.data_path_addresses()[0][1])
    jobkit_ms, env_ms = [], []
    for _ in range(reps):
        jobkit.barrier()
        start = time.perf_counter()
        jobkit.torch.init_process_group("gloo")
        jobkit_ms.append((time.perf_counter() - start) * 1000)
        dist.destroy_process_group()
        os.environ.update(MASTER_ADDR=master, MASTER_PORT=str(jobkit.broadcast_object(free_port())),
                          RANK=str(jobkit.rank()), WORLD_SIZE=str(jobkit.world_size()))
        jobkit.barrier()
        start = time.perf_counter()
        dist.init_process_group("gloo", init_method="env://")
        env_ms.append((time.perf_counter() - start) * 1000)
        dist.destroy_process_group()
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        del os.environ[key]
    return sorted(jobkit_ms)[reps // 2], sorted(env_ms)[reps // 2]


def main():
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    results = []
    jobkit_init, env_init = init_times(reps)
    for impl, ms in (("jobkit", jobkit_init), ("torch_env", env_init)):
        results.append({"impl": impl, "op": "init_process_group", "ranks": jobkit.world_size(),
                        "nodes": jobkit.num_nodes(), "iters": reps, "median_ms": round(ms, 1), "timing": "rank0"})
    jobkit.torch.init_process_group("gloo")
    obj = {"step": 1234, "loss": 0.125, "tag": "x" * 16, "ok": True}
    me = jobkit.rank()

    def torch_broadcast():
        box = [obj if me == 0 else None]
        dist.broadcast_object_list(box, src=0)

    def torch_all_gather():
        out = [None] * jobkit.world_size()
        dist.all_gather_object(out, obj)

    ops = [
        ("barrier", "jobkit", jobkit.barrier, False), ("barrier", "torch_gloo", dist.barrier, False),
        ("broadcast_object", "jobkit", lambda: jobkit.broadcast_object(obj), True),
        ("broadcast_object", "torch_gloo", torch_broadcast, True),
        ("all_gather_object", "jobkit", lambda: jobkit.all_gather_object(obj), False),
        ("all_gather_object", "torch_gloo", torch_all_gather, False),
    ]
    for name, impl, op, rooted in ops:
        results.append(run(name, impl, op, iters, rooted))
    dist.destroy_process_group()
    if me == 0:
        for r in results:
            print(json.dumps(r), flush=True)
        medians = {(r["impl"], r["op"]): r.get("median_us", r.get("median_ms")) for r in results}
        for op in ("barrier", "broadcast_object", "all_gather_object"):
            print(f"{op}: torch_gloo / jobkit = {medians[('torch_gloo', op)] / medians[('jobkit', op)]:.1f}x")
        print(f"init_process_group: torch env:// / jobkit = "
              f"{medians[('torch_env', 'init_process_group')] / medians[('jobkit', 'init_process_group')]:.2f}x")


if __name__ == "__main__":
    main()
