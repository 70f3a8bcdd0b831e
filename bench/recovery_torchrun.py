#!/usr/bin/env python3
"""examples/train_requeue.cpp's step in torch, for torchrun's and ft_launcher's restarts (bench/recovery_peers.sh).

Rank r adds (r + 1) * (s + 1) at step s, one step per ``--step-ms`` (100 ms): the final sum is known,
and a resumed run must end with exactly the result of an uninterrupted one. Every ``--every`` steps
each rank writes its state into ``CKPT/step-N/rank-R``, the ranks meet in a gloo barrier, and rank 0
marks the checkpoint whole (``CKPT/step-N/whole``, holding the world size); the two newest whole
ones are kept. A restarted worker resumes from the newest whole checkpoint of its world size.

Rank 0 prints one line per phase with the wall clock (``time.time()``, seconds): ``started``
(the worker's interpreter ran this file), ``world ready`` (``init_process_group`` returned),
``checkpoint loaded`` and ``first step done`` (the first step of this worker after the load), each
with torchelastic's restart count (``TORCHELASTIC_RESTART_COUNT``), else jobkit run's
(``JOBKIT_RECOVERY_ATTEMPT``), as the attempt.

Run as a worker (under torchrun or ft_launcher, or under jobkit run and jobkit exec: slurm/train-python.sbatch):
    recovery_torchrun.py --ckpt DIR [--steps N] [--step-ms MS] [--every K] [--result FILE]
                         [--pg-timeout S]
Run as torchrun itself, its log lines given the wall clock (the agent's failure and restart times):
    recovery_torchrun.py --agent TORCHRUN-ARGS...
The same for nvidia-resiliency-ext's ft_launcher:
    recovery_torchrun.py --ft-agent FT_LAUNCHER-ARGS...
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import shutil
import socket
import sys
import time
from pathlib import Path


def _agent(launcher: str, argv: list[str]) -> int:
    """Runs torchrun's (or ft_launcher's) main with every log line stamped by the wall clock."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(created).3f %(name)s %(levelname)s: %(message)s",
        force=True,
    )
    if launcher == "torchrun":
        from torch.distributed.run import main
    else:
        from nvidia_resiliency_ext.fault_tolerance.launcher import main  # type: ignore[import-not-found]
    sys.argv = [launcher, *argv]
    result = main()
    return int(result or 0)


def _say(rank: int, text: str) -> None:
    if rank == 0:
        print(f"recovery_torchrun: rank 0: {text}", flush=True)


def _whole(ckpt: Path, world: int) -> list[int]:
    """The steps of the whole checkpoints of this world size, newest first."""
    steps = []
    for d in ckpt.glob("step-*"):
        marker = d / "whole"
        try:
            if int(marker.read_text()) == world:
                steps.append(int(d.name.removeprefix("step-")))
        except (OSError, ValueError):
            continue
    return sorted(steps, reverse=True)


def _save(ckpt: Path, step: int, total: int, rank: int, world: int) -> None:
    import torch.distributed as dist

    d = ckpt / f"step-{step}"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".rank-{rank}.tmp"
    tmp.write_text(f"{step} {total}\n")
    os.replace(tmp, d / f"rank-{rank}")
    dist.barrier()
    if rank == 0:
        tmp = d / ".whole.tmp"
        tmp.write_text(f"{world}\n")
        os.replace(tmp, d / "whole")
        for old in _whole(ckpt, world)[2:]:
            shutil.rmtree(ckpt / f"step-{old}", ignore_errors=True)


def _worker(args: argparse.Namespace) -> int:
    started = time.time()
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    # torchelastic's count of restarts; under jobkit run (slurm/train-python.sbatch), its count of steps.
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", os.environ.get("JOBKIT_RECOVERY_ATTEMPT", "0")))
    if args.result:
        Path(f"{args.result}.pid.{rank}").write_text(f"{os.getpid()} {socket.gethostname()}\n")
    _say(rank, f"attempt {attempt}: started at {started:.3f}, torch imported at {time.time():.3f} (torch {torch.__version__}, world {world})")
    kwargs = {}
    if args.pg_timeout is not None:
        kwargs["timeout"] = datetime.timedelta(seconds=args.pg_timeout)
    dist.init_process_group("gloo", **kwargs)
    _say(rank, f"attempt {attempt}: world ready at {time.time():.3f}")

    ckpt = Path(args.ckpt)
    ckpt.mkdir(parents=True, exist_ok=True)
    next_step, total = 0, 0
    whole = _whole(ckpt, world)
    if whole:
        next_step, total = (int(x) for x in (ckpt / f"step-{whole[0]}" / f"rank-{rank}").read_text().split())
        _say(rank, f"attempt {attempt}: resuming from step {next_step} (sum {total}); checkpoint loaded at {time.time():.3f}")
    else:
        _say(rank, f"attempt {attempt}: no checkpoint, starting at step 0; checkpoint loaded at {time.time():.3f}")

    first = True
    while next_step < args.steps:
        time.sleep(args.step_ms / 1000)  # stands for the real work
        total += (rank + 1) * (next_step + 1)
        next_step += 1
        if first:
            _say(rank, f"attempt {attempt}: first step done at {time.time():.3f} (step {next_step})")
            first = False
        if next_step % args.every == 0 and next_step < args.steps:
            _save(ckpt, next_step, total, rank, world)

    sums = torch.tensor([total], dtype=torch.int64)
    dist.all_reduce(sums)
    if rank == 0:
        _say(rank, f"finished {args.steps} steps: total {int(sums.item())}")
        if args.result:
            Path(args.result).write_text(f"{int(sums.item())}\n")
    dist.destroy_process_group()
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("--agent", "--ft-agent"):
        return _agent("torchrun" if sys.argv[1] == "--agent" else "ft_launcher", sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", required=True, help="a directory every node sees")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-ms", type=int, default=100)
    parser.add_argument("--every", type=int, default=10, help="a checkpoint every K steps")
    parser.add_argument("--result", default="", help="rank 0 writes the final sum here; RESULT.pid.R each rank's pid and node")
    parser.add_argument("--pg-timeout", type=float, default=None, help="the process group's timeout (s); torch's default when unset")
    return _worker(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
