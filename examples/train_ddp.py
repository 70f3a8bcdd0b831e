#!/usr/bin/env python3
"""A torch DDP training script for srun --mpi=pmix that survives pre-emption (slurm/train-ddp-gpu.sbatch).

    srun --mpi=pmix --kill-on-bad-exit=1 python3 train_ddp.py --ckpt DIR [--steps N] [--every K]

No torchrun and no MASTER_ADDR or MASTER_PORT: jobkit.torch.init_process_group takes the rank and
world size from the launcher. nccl where the task sees a GPU (one task per GPU; init_process_group
sets the device by jobkit's rule: cuda:0 under --gpus-per-task=1), gloo on CPUs. It resumes from the
newest complete checkpoint; when Slurm signals (pre-emption's SIGTERM, --signal=USR1@300 before the
time limit, scancel --signal=USR1) every rank stops at the same step and commits a checkpoint, and
rank 0 requeues the job (Checkpoints.requeue, which records the outcome for the batch script).
Exit 0, stopped or finished; finished leaves a checkpoint of the last step, so a later run with a
larger --steps goes on from there.
"""
import argparse
import itertools
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import jobkit
import jobkit.torch

def save(saved, step, model, optimizer):
    """Every rank writes its own part and reads it back on resume: DDP's replicas are equal, so each
    part is a whole copy (simple; for a large model, world_size copies). commit() makes the step
    whole on every rank or absent."""
    state = {"step": step, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(state, os.path.join(saved.begin(step), "state.pt"))
    saved.commit()  # collective


def train(args, stop):
    rank, world = dist.get_rank(), dist.get_world_size()
    device = jobkit.torch.device()  # the GPU init_process_group set ("cuda:0" under --gpus-per-task=1), or cpu

    torch.manual_seed(0)  # one data set and one initial model on every rank
    data = TensorDataset(torch.randn(1024, 16), torch.randn(1024, 1))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler, drop_last=True)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    saved = jobkit.Checkpoints(args.ckpt, keep=2)  # collective
    step = 0
    latest = saved.latest()  # the newest step complete on every rank, or None
    if latest is not None:
        state = torch.load(os.path.join(saved.part(latest), "state.pt"), map_location=device)
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"rank {rank}: resumed from step {step}", flush=True)
    model = DistributedDataParallel(net, device_ids=[device] if device.type == "cuda" else None)

    while step < args.steps:
        epoch, done = divmod(step, len(loader))
        sampler.set_epoch(epoch)  # the epoch's shuffle, the same on every rank
        for x, y in itertools.islice(loader, done, None):  # past the batches trained on before a stop
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()  # DDP averages the gradients over the ranks
            optimizer.step()
            step += 1
            if stop.stop_requested():  # one small all_reduce: the same answer on every rank
                save(saved, step, model, optimizer)
                print(f"rank {rank}: stopped at step {step} ({stop.cause}), checkpoint committed", flush=True)
                saved.requeue(stop.cause)  # rank 0 asks Slurm; the outcome is logged and recorded once
                return
            if step % args.every == 0 or step == args.steps:
                save(saved, step, model, optimizer)
            if step == args.steps:
                break

    # A fingerprint of the weights: the same on every rank, as DDP keeps the replicas equal.
    weights = sum(float(p.detach().double().sum()) for p in model.parameters())
    print(f"rank {rank}: finished at step {step}, weights {weights!r}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="checkpoint directory every node sees")
    parser.add_argument("--steps", type=int, default=1000, help="train until this many steps in all")
    parser.add_argument("--every", type=int, default=100, help="a checkpoint every this many steps")
    args = parser.parse_args()

    jobkit.torch.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    with jobkit.StopGuard() as stop:  # collective; SIGTERM, SIGUSR1, SIGUSR2 and SIGINT are recorded, not fatal
        train(args, stop)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
