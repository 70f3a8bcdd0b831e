"""A DDP training step as a torch user writes it, run on every rank of a step under srun --mpi=pmix or
under jobkit exec: by tests/launched/venv.sh (a venv with PyPI's torch) and portable_wheel.sh (the
portable wheel beside PyPI's torch, and beside Debian 13's).

usage: ddp_check.py ORDER INIT
  ORDER  torch-first | jobkit-first: which of the two modules the script imports first;
         torch-only: an unchanged torch script, which never imports jobkit (INIT env only)
  INIT   jobkit: jobkit.torch.init_process_group("gloo") (its TCPStore must be torch's libuv one
                 where torch has libuv);
         env:    torch.distributed.init_process_group("gloo") from the variables jobkit exec set
                 (init_method env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)

Each rank trains a linear model for two epochs on its DistributedSampler's share of one dataset, then
checks that every rank holds the same weights (torch's all_gather), that they moved, that torch and
jobkit agree on who is who, and that jobkit's own collectives work beside torch's (not with
torch-only). Prints
"rank R: ddp ok ..." or "rank R: WRONG: ..." lines; exits non-zero on any WRONG.
"""
import os
import sys
from datetime import timedelta

ORDER, INIT = sys.argv[1], sys.argv[2]
if ORDER == "torch-first":
    import torch
    import jobkit
elif ORDER == "jobkit-first":
    import jobkit
    import torch
elif ORDER == "torch-only":
    import torch
    jobkit = None
else:
    raise SystemExit(f"ORDER {ORDER!r}: torch-first, jobkit-first or torch-only")

import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

failures = 0


def expect(ok, what):
    global failures
    if not ok:
        failures += 1
        print(f"rank {os.environ.get('SLURM_PROCID', '?')}: WRONG: {what}", flush=True)


def torch_has_libuv():
    """Whether this torch was built with libuv (PyPI's is; Debian's is not): its TCPStore's default
    backend then, and jobkit's store must be that one."""
    try:
        dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10), use_libuv=True)
    except RuntimeError as e:
        if "libuv" in str(e):
            return False
        raise
    return True


def initialise():
    """Returns a description of the store."""
    if INIT == "jobkit":
        import jobkit.torch
        store = jobkit.torch.init_process_group("gloo", timeout=300.0)
        libuv = getattr(store, "libuvBackend", None)
        expect(libuv is torch_has_libuv(), f"jobkit's TCPStore is not torch's default one (libuvBackend={libuv!r})")
        return f"jobkit store libuv={libuv}"
    if INIT == "env":
        for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "JOBKIT_TORCH_VARIABLES"):
            expect(bool(os.environ.get(name)), f"jobkit exec did not set {name}")
        dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=300))
        return f"env:// MASTER_ADDR={os.environ['MASTER_ADDR']}"
    raise SystemExit(f"INIT {INIT!r}: jobkit or env")


def main():
    how = initialise()
    rank, world = dist.get_rank(), dist.get_world_size()
    expect(rank == int(os.environ["SLURM_PROCID"]), f"torch's rank {rank} is not SLURM_PROCID")
    if jobkit is not None:
        me = jobkit.identity()
        expect((me.rank, me.world_size) == (rank, world), f"jobkit says {me.rank}/{me.world_size}, torch {rank}/{world}")
        expect(me.source == "pmix", f"jobkit's identity came from {me.source}, not PMIx")
        expect(int(os.environ["LOCAL_RANK"]) == me.local_rank, f"LOCAL_RANK={os.environ['LOCAL_RANK']} vs {me.local_rank}")
        where = f"node {me.node_rank}/{me.num_nodes} local {me.local_rank}/{me.local_world_size}"
    else:
        where = f"node {os.environ['NODE_RANK']} local {os.environ['LOCAL_RANK']}/{os.environ['LOCAL_WORLD_SIZE']}"

    torch.manual_seed(0)  # one dataset and one initial model on every rank
    data = TensorDataset(torch.randn(240, 8), torch.randn(240, 1))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(data, batch_size=6, sampler=sampler)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    before = torch.cat([p.detach().clone().flatten() for p in model.parameters()])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.mse_loss(model(x), y).backward()
            optimizer.step()
            steps += 1
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights)
    expect(all(torch.equal(w, gathered[0]) for w in gathered),
           f"weights differ across ranks: {[round(float(w.sum()), 6) for w in gathered]}")
    expect(not torch.equal(weights, before), "the weights did not move")
    if jobkit is not None:  # jobkit's collectives beside torch's, in the same process
        expect(jobkit.all_gather_object((rank, steps)) == [(r, steps) for r in range(world)],
               "jobkit.all_gather_object (or the step counts differ)")
        jobkit.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: ddp {'ok' if failures == 0 else 'WRONG'} {ORDER} {INIT} {where} steps {steps} "
          f"torch {torch.__version__} ({how})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
