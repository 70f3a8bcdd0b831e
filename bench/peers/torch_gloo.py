#!/usr/bin/python3
"""PEER benchmark: torch.distributed with the gloo backend (not part of jobkit).

Rendezvous is env:// ONLY: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must be set in the
environment (under srun, bench/peers/run_torch_gloo.sh derives them from Slurm; later jobkit will
set them itself). Run with Debian's /usr/bin/python3 (python3-torch 1.13).

    usage: torch_gloo.py [ITERS [WARMUP [OBJ_ITERS [LARGE_BYTES [LARGE_ITERS]]]]]
           (defaults: 500, 20, ITERS // 5 but >= 1, 0: no large payloads, 3)

Ops (each: WARMUP untimed iterations, then ITERS timed ones; all_gather_object uses OBJ_ITERS
timed ones after min(WARMUP, max(1, OBJ_ITERS // 10)) untimed ones: it is slow):
  init_process_group  wall time of init_process_group("gloo", init_method="env://") (iters 1,
                      rank 0's own time, "timing":"rank0"); with JOBKIT_BENCH_EXEC_NS set (by
                      run_torch_gloo.sh) also from_exec_us (slowest rank) and rank0_from_exec_us:
                      from the process's start to the end of init_process_group
  barrier             dist.barrier()
  all_reduce          all_reduce (SUM) of a 1-element float64 tensor            bytes = 8
  broadcast_object_list  broadcast_object_list([small dict]) from rank 0        bytes = pickled size
  all_gather_object   all_gather_object of a small dict                         bytes = pickled size
  broadcast           broadcast of a uint8 tensor of 64 B and of 1 KiB from rank 0
  all_gather          all_gather of a 1-element int64 tensor per rank           bytes = 8
  broadcast, all_gather of LARGE_BYTES (all_gather: LARGE_BYTES / ranks per rank) into tensors
                      allocated once, 1 warmup and LARGE_ITERS timed iterations, barrier-separated

A barrier precedes each op's loop (synchronised start). Rooted ops (broadcast, broadcast_object_list)
have an untimed barrier after every iteration ("iter_sep":"barrier"), otherwise the root runs ahead.
Every rank times every iteration (time.perf_counter_ns); iteration i's time is the MAX over ranks
(all_reduce MAX of the time vectors, after the loop); median_us / p99_us are over those maxima,
rank0_median_us is rank 0's own median, loop_avg_us the slowest rank's timed loop over ITERS, cpu_pct
the highest share of a core a rank's process used during its timed loop (getrusage), as
bench/peers/mpi_bench.c and bench/jobkit_loop.cpp report them. Rank 0 prints one JSON object per op on stdout, e.g.
  {"impl":"torch_gloo","op":"barrier","ranks":24,"nodes":3,"bytes":0,"iters":500,
   "median_us":...,"p99_us":...,"rank0_median_us":...,"timing":"max_over_ranks"}
"nodes" = number of distinct socket.gethostname() values among the ranks.
"""
import json
import math
import os
import pickle
import resource
import socket
import sys
import time


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def p99(v):
    s = sorted(v)
    return s[max(1, math.ceil(0.99 * len(s))) - 1]


def main():
    args = [int(a) for a in sys.argv[1:]]
    iters = args[0] if len(args) > 0 else 500
    warmup = args[1] if len(args) > 1 else 20
    obj_iters = args[2] if len(args) > 2 else max(1, iters // 5)
    large = args[3] if len(args) > 3 else 0
    large_iters = args[4] if len(args) > 4 else 3
    if iters < 1 or warmup < 0 or obj_iters < 1 or large < 0 or large_iters < 1:
        sys.exit("usage: torch_gloo.py [ITERS>=1 [WARMUP>=0 [OBJ_ITERS>=1 [LARGE_BYTES>=0 [LARGE_ITERS>=1]]]]]")
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        sys.exit("torch_gloo.py: env:// rendezvous needs %s in the environment "
                 "(under srun use bench/peers/run_torch_gloo.sh)" % ", ".join(missing))

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    t0 = time.perf_counter_ns()
    dist.init_process_group("gloo", init_method="env://")
    t_init_us = (time.perf_counter_ns() - t0) / 1e3
    # From the process's start, as bench/jobkit_loop's from_exec_us (bench/peers/run_torch_gloo.sh
    # stamps the wall clock just before it execs Python): Python's start and `import torch` included.
    exec_ns = os.environ.get("JOBKIT_BENCH_EXEC_NS")
    own_from_exec_us = (time.time_ns() - int(exec_ns)) / 1e3 if exec_ns else None
    assert dist.get_rank() == rank and dist.get_world_size() == world

    hosts = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    nodes = len(set(hosts))

    def emit(op, nbytes, n, med, p, extra=None):
        if rank != 0:
            return
        rec = {"impl": "torch_gloo", "op": op, "ranks": world, "nodes": nodes, "bytes": nbytes,
               "iters": n, "median_us": round(med, 1), "p99_us": round(p, 1)}
        rec.update(extra or {})
        print(json.dumps(rec, separators=(",", ":")), flush=True)

    init_extra = {"timing": "rank0"}
    if own_from_exec_us is not None:
        slowest = torch.tensor([own_from_exec_us], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        init_extra.update(from_exec_us=round(slowest.item()), rank0_from_exec_us=round(own_from_exec_us))
    emit("init_process_group", 0, 1, t_init_us, t_init_us, init_extra)

    def bench(op, nbytes, fn, n, sep=False, check=None, nwarm=warmup):
        dist.barrier()  # synchronised start
        for _ in range(nwarm):
            fn()
            if sep:
                dist.barrier()
        times = [0.0] * n
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        loop0 = time.perf_counter_ns()
        for i in range(n):
            a = time.perf_counter_ns()
            fn()
            times[i] = (time.perf_counter_ns() - a) / 1e3
            if sep:
                dist.barrier()
        loop_us = (time.perf_counter_ns() - loop0) / 1e3
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu_us = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) * 1e6
        if check is not None:
            check()
        own = torch.tensor(times + [loop_us, 100.0 * cpu_us / loop_us], dtype=torch.float64)
        mx = own.clone()
        dist.all_reduce(mx, op=dist.ReduceOp.MAX)
        loop_max, cpu_max = mx[-2].item(), mx[-1].item()
        mx = mx[:-2]
        extra = {"rank0_median_us": round(median(times), 1), "timing": "max_over_ranks",
                 "loop_avg_us": round(loop_max / n, 1), "cpu_pct": round(cpu_max, 1)}
        if nbytes >= 1 << 20:
            extra["mb_per_s"] = round(nbytes / median(mx.tolist()), 1)
        if sep:
            extra["iter_sep"] = "barrier"
        emit(op, nbytes, n, median(mx.tolist()), p99(mx.tolist()), extra)

    bench("barrier", 0, dist.barrier, iters)

    x = torch.zeros(1, dtype=torch.float64)

    def all_reduce():
        x.fill_(1.0)
        dist.all_reduce(x)

    def check_all_reduce():
        assert x.item() == float(world), x.item()

    bench("all_reduce", 8, all_reduce, iters, check=check_all_reduce)

    small = {"op": "step", "seq": 12345, "ok": True, "name": "rank0", "vals": [1.5, 2.5, 3.5]}
    obj_bytes = len(pickle.dumps(small))
    bol = [None]

    def bcast_obj():
        bol[0] = small if rank == 0 else None
        dist.broadcast_object_list(bol, src=0)

    def check_bcast_obj():
        assert bol[0] == small, bol[0]

    bench("broadcast_object_list", obj_bytes, bcast_obj, iters, sep=True, check=check_bcast_obj)

    mine = dict(small, name="rank%d" % rank, seq=rank)
    gathered = [None] * world

    def all_gather_obj():
        dist.all_gather_object(gathered, mine)

    def check_gather():
        assert [g["seq"] for g in gathered] == list(range(world)), gathered

    bench("all_gather_object", len(pickle.dumps(mine)), all_gather_obj, obj_iters,
          check=check_gather, nwarm=min(warmup, max(1, obj_iters // 10)))

    for nb in (64, 1024):
        buf = torch.zeros(nb, dtype=torch.uint8)

        def bcast():
            if rank == 0:
                buf.fill_(0xA5)
            dist.broadcast(buf, src=0)

        def check_bcast():
            assert bool((buf == 0xA5).all()), "broadcast payload wrong"

        bench("broadcast", nb, bcast, iters, sep=True, check=check_bcast)

    one = torch.tensor([1000003 * rank], dtype=torch.int64)
    ones = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]

    def check_all_gather():
        assert [t.item() for t in ones] == [1000003 * r for r in range(world)], ones

    bench("all_gather", 8, lambda: dist.all_gather(ones, one), iters, check=check_all_gather)

    if large > 0:
        big = torch.full((large,), 0xB5 if rank == 0 else 0, dtype=torch.uint8)

        def check_big():
            assert big[-1].item() == 0xB5, "large broadcast payload wrong"

        bench("broadcast", large, lambda: dist.broadcast(big, src=0), large_iters, sep=True, check=check_big,
              nwarm=1)
        part = large // world
        piece = big[:part].clone()
        pieces = [torch.zeros(part, dtype=torch.uint8) for _ in range(world)]
        bench("all_gather", part * world, lambda: dist.all_gather(pieces, piece), large_iters, sep=True, nwarm=1)

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
