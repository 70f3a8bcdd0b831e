"""jobkit.torch's identity variables and idempotence under a launcher: tests/launched/python.sh
torch-env runs it under srun --mpi=pmix; by hand, under any PMIx launcher:
  PYTHONPATH=<build>/python mpirun --allow-run-as-root --oversubscribe -np 4 /usr/bin/python3 python_torch.py

After init_process_group("gloo", timeout=30.0), RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
NODE_RANK and GROUP_RANK hold the identity (checked against the launcher's own variables where it
sets them), a second call with the same arguments returns the same store, one with other arguments
raises, a gloo all_reduce sums every rank, rank_zero_only runs on rank 0 alone, and the device rule
over this rank's real local rank picks cuda:0 with one device per task. Each rank prints
"rank R: torch-env ok" or its WRONG lines.
"""
import os
import sys

import torch
import torch.distributed as dist

import jobkit
import jobkit.torch

failures = 0


def expect(ok, what):
    global failures
    if not ok:
        failures += 1
        print(f"rank {jobkit.rank()}: WRONG: {what}", flush=True)


def launcher_view():
    """(rank, local rank, world size) as the launcher itself tells them, or None."""
    for rank, local, size in (("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
                              ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank in os.environ and local in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[local]), int(os.environ[size])
    return None


def main():
    me = jobkit.identity()
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        expect(name not in os.environ, f"{name} is set before init")
    store = jobkit.torch.init_process_group("gloo", timeout=30.0)
    expected = {"RANK": me.rank, "LOCAL_RANK": me.local_rank, "WORLD_SIZE": me.world_size,
                "LOCAL_WORLD_SIZE": me.local_world_size, "NODE_RANK": me.node_rank, "GROUP_RANK": me.node_rank}
    seen = {name: os.environ.get(name) for name in expected}
    expect(seen == {name: str(value) for name, value in expected.items()}, f"variables {seen}")
    view = launcher_view()
    expect(view is None or view == (int(seen["RANK"]), int(seen["LOCAL_RANK"]), int(seen["WORLD_SIZE"])),
           f"the launcher says (rank, local rank, size) = {view}, the variables {seen}")
    # Every node's ranks agree on their node's index, and the indexes count the nodes.
    nodes = jobkit.all_gather_object((me.hostname, os.environ.get("NODE_RANK")))
    expect(len({n for _, n in nodes}) == len({h for h, _ in nodes}) == me.num_nodes,
           f"node ranks {sorted(set(nodes))}")
    expect(jobkit.torch.init_process_group("gloo", timeout=30) is store, "a second call made another store")
    try:
        jobkit.torch.init_process_group("gloo", timeout=31.0)
        expect(False, "a call with another timeout was accepted")
    except jobkit.InvalidArgumentError as e:
        expect("timeout=" in str(e), f"the refusal names no argument: {e}")
    value = torch.tensor([float(me.rank + 1)])
    dist.all_reduce(value)
    expect(value.item() == me.world_size * (me.world_size + 1) / 2, f"all_reduce gave {value.item()}")
    ran = jobkit.all_gather_object(jobkit.rank_zero_only(lambda: me.rank)())
    expect(ran == [0] + [None] * (me.world_size - 1), f"rank_zero_only returned {ran}")
    expect(jobkit.select_device(1) == "cuda:0", "one device per task: not cuda:0")
    expect(jobkit.select_device(me.local_world_size) == f"cuda:{me.local_rank}", "a node's devices: not the local rank's")
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {me.rank}: torch-env {'ok' if failures == 0 else 'WRONG'} all_reduce {value.item():g}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
