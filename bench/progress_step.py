"""A training loop under `jobkit run` for bench/progress.sh (docs/progress.md): steps paced by a stop
agreement (StopGuard), the issue's fault-free shape (a first step 10 times the others, a checkpoint
save 5 times a step), then, in the step's first attempt only, the fault of KIND mid-step:
  stop   rank 3 stops itself (SIGSTOP); the others wait in the stop agreement
  stuck  rank 2 hangs in load_shard(), outside any jobkit call; the others wait in the agreement
  all    every rank hangs in load_shard()
  clean  no fault; rank 4 computes twice as long as the others (a straggler at half speed)
A restarted step (JOBKIT_RECOVERY_ATTEMPT above 0) resumes after the newest checkpoint and
finishes. The faulting rank (rank 0 for `all`) prints "bench-fault T" (wall clock, s) just before
the fault. usage: progress_step.py KIND CHECKPOINT_ROOT
Environment: BENCH_STEP (seconds of compute per step, default 0.3), BENCH_STEPS (default 30),
BENCH_FAULT_STEP (default 20), BENCH_SAVE_STEP (default 8)."""
import os
import signal
import sys
import time

import jobkit

kind, root = sys.argv[1], sys.argv[2]
STEP = float(os.environ.get("BENCH_STEP", "0.3"))
STEPS = int(os.environ.get("BENCH_STEPS", "30"))
FAULT_STEP = int(os.environ.get("BENCH_FAULT_STEP", "20"))
SAVE_STEP = int(os.environ.get("BENCH_SAVE_STEP", "8"))
attempt = int(os.environ.get("JOBKIT_RECOVERY_ATTEMPT", "0"))


def load_shard(seconds: float) -> None:
    time.sleep(seconds)  # stuck here, outside jobkit


saved = jobkit.Checkpoints(root)
stop = jobkit.StopGuard()
rank = jobkit.rank()
start = (saved.latest() or 0) + 1
slow = 2 if kind == "clean" and rank == 4 else 1
for step in range(start, STEPS + 1):
    if attempt > 0:
        time.sleep(STEP / 4)  # the restarted step only has to finish
    elif step == 1:
        time.sleep(10 * STEP)  # the first step: compilation
    elif step == FAULT_STEP and kind != "clean":
        time.sleep(STEP / 2)  # mid-step
        if (kind == "stop" and rank == 3) or (kind == "stuck" and rank == 2) or (kind == "all" and rank == 0):
            print(f"bench-fault {time.time():.3f}", flush=True)
        if kind == "stop" and rank == 3:
            os.kill(os.getpid(), signal.SIGSTOP)
        if kind == "all" or (kind == "stuck" and rank == 2):
            load_shard(120)
        time.sleep(STEP / 2)
    else:
        time.sleep(STEP * slow)
    if step == SAVE_STEP and attempt == 0:
        saved.begin(step)
        time.sleep(5 * STEP * slow)  # a save of 5 steps
        saved.commit()
    stop.stop_requested()
print(f"rank {rank} attempt {attempt}: finished at step {STEPS}", flush=True)
