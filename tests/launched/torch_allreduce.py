"""A torch.distributed program started by `jobkit exec`: env:// rendezvous with gloo, one
all_reduce, and a check of the variables jobkit set against Slurm's own view."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    assert rank == int(os.environ["SLURM_PROCID"]), (rank, os.environ["SLURM_PROCID"])
    assert world == int(os.environ["SLURM_NTASKS"]), (world, os.environ["SLURM_NTASKS"])
    assert int(os.environ["LOCAL_RANK"]) == int(os.environ["SLURM_LOCALID"])
    dist.init_process_group("gloo", init_method="env://")
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    ok = value.item() == expected
    print(f"rank {rank}: all_reduce {value.item():g} (expected {expected:g}) "
          f"{'ok' if ok else 'WRONG'} via {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
