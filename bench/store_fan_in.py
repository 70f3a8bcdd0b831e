"""The c10d store's fan-in under a launcher: every rank adds 1 to one key per round, the rank whose
add completes the count sets a "done" key, and every rank waits for it; repeated ROUNDS times.
One JSON line per rank on stdout: the store, the world, the time to make the store (from the
first jobkit barrier after import to the store ready on every rank) and each round's time.

    srun --mpi=pmix -N3 -n48 python3 bench/store_fan_in.py KIND [ROUNDS]
KIND: tcp (jobkit.torch's default: torch's TCPStore found through jobkit), jobkit (a JobkitStore),
      env (torch's TCPStore at MASTER_ADDR/MASTER_PORT, as torchrun users set it up).
"""
import json
import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

import jobkit
import jobkit.torch
from jobkit._store import JobkitStore


def make(kind, me):
    timeout = timedelta(seconds=120)
    if kind == "tcp":
        return jobkit.torch._tcp_store(me, timeout)
    if kind == "jobkit":
        return JobkitStore(timeout)
    if kind == "env":
        return jobkit.torch._tcp_store_object(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                              me.world_size, me.rank == 0, timeout)
    raise SystemExit(f"unknown kind {kind!r}: tcp, jobkit or env")


def main():
    kind = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    me = jobkit.identity()
    jobkit.barrier()  # the data path up on every rank: what follows is the store alone
    start = time.perf_counter()
    store = make(kind, me)
    store.set(f"ready{me.rank}", "1")
    store.wait([f"ready{r}" for r in range(me.world_size)] if me.rank == 0 else ["ready0"])
    setup_ms = (time.perf_counter() - start) * 1e3
    jobkit.barrier()
    times = []
    for i in range(rounds):
        begin = time.perf_counter()
        if store.add(f"count{i}", 1) == me.world_size:
            store.set(f"done{i}", "1")
        store.wait([f"done{i}"])
        times.append((time.perf_counter() - begin) * 1e3)
    jobkit.barrier()
    print(json.dumps({"series": "store_fan_in", "store": kind, "world": me.world_size, "nodes": me.num_nodes,
                      "rank": me.rank, "setup_ms": round(setup_ms, 3), "round_ms": [round(t, 3) for t in times]}),
          flush=True)


if __name__ == "__main__":
    main()
