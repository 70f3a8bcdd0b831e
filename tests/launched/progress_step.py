"""A training loop for tests/launched/progress.sh: steps paced by a stop agreement (StopGuard), a
first step 10 times the others, a checkpoint save 5 times a step, one rank slower than the
others, then the fault of the mode. usage: progress_step.py MODE CHECKPOINT_ROOT
  faults   after 30 steps: rank 3 stops itself (SIGSTOP), rank 2 hangs in load_shard(), outside
           any jobkit call; the others wait in the stop agreement
  all      after 8 steps: every rank hangs in load_shard()
  restart  under `jobkit run`: 20 steps, each adding an all_reduce to a total that every 5th
           step's checkpoint keeps; the step's first attempt hangs at step 12 with rank 2 in
           load_shard(), its second at step 17 with every rank there; the third finishes and
           rank 0 writes the total to RESULT (usage: progress_step.py restart ROOT RESULT)
  bad      one barrier: a malformed JOBKIT_PROGRESS_FACTOR is named"""
import os
import signal
import sys
import time

import jobkit

mode, root = sys.argv[1], sys.argv[2]
STEP = 0.2  # seconds of compute per step; rank 4 takes twice that


def load_shard(seconds: float) -> None:
    time.sleep(seconds)  # stuck here, outside jobkit


if mode == "bad":
    try:
        jobkit.barrier()
    except jobkit.InvalidEnvironmentError as e:
        print(f"refused: {e}", flush=True)
        sys.exit(3)
    sys.exit(0)

if mode == "restart":
    attempt = int(os.environ["JOBKIT_RECOVERY_ATTEMPT"])
    saved = jobkit.Checkpoints(root)
    stop = jobkit.StopGuard()
    rank = jobkit.rank()
    latest = saved.latest()
    total = 0
    if latest is not None:
        with open(os.path.join(saved.part(latest), "total")) as f:
            total = int(f.read())
    print(f"rank {rank} attempt {attempt}: resuming after step {latest} with total {total}", flush=True)
    for step in range((latest or 0) + 1, 21):
        time.sleep(STEP)
        if (attempt, step) == (0, 12) and rank == 2 or (attempt, step) == (1, 17):
            print(f"rank {rank} attempt {attempt}: stuck in load_shard at step {step}", flush=True)
            load_shard(120)
        total += jobkit.all_reduce((rank + 1) * step)
        if step % 5 == 0:
            with open(os.path.join(saved.begin(step), "total"), "w") as f:
                f.write(str(total))
            saved.commit()
        stop.stop_requested()
    if rank == 0:
        with open(sys.argv[3], "w") as f:
            f.write(str(total))
    sys.exit(0)

saved = jobkit.Checkpoints(root)
stop = jobkit.StopGuard()
steps = 30 if mode == "faults" else 8
rank = jobkit.rank()
for step in range(1, steps + 1):
    work = STEP * (2 if rank == 4 else 1)
    time.sleep(10 * STEP if step == 1 else work)  # the first step: compilation
    if step == 12:
        saved.begin(step)
        time.sleep(5 * 2 * STEP)  # a save of 5 steps (each paced by rank 4)
        saved.commit()
    stop.stop_requested()
print(f"rank {rank} fault-free part done at {time.time():.3f}", flush=True)
if mode == "faults" and rank == 3:
    os.kill(os.getpid(), signal.SIGSTOP)
if mode == "all" or rank == 2:
    load_shard(60)
stop.stop_requested()
