"""A torch step whose steps jobkit learns (tests/launched/venv.sh).

usage: torch_progress.py INIT STEPS STUCK_RANK
INIT: "jobkit" (jobkit.torch.init_process_group) or "env" (torch's env://, under `jobkit exec`).
Each step: 50 ms of work, torch's all_reduce (gloo), jobkit.progress(). After STEPS steps rank
STUCK_RANK stops itself (SIGSTOP); the others wait in torch's all_reduce past their learned bound,
and their `hang` events name it, from torch's flight recorder, with this file's line (venv.sh
finds it by its ALL_REDUCE_LINE comment).
"""
import os
import signal
import sys
import time

import jobkit
import jobkit.torch
import torch
import torch.distributed as dist

INIT = sys.argv[1]
STEPS = int(sys.argv[2])
STUCK_RANK = int(sys.argv[3])

if INIT == "jobkit":
    jobkit.torch.init_process_group("gloo")
else:
    dist.init_process_group("gloo")
weights = torch.ones(4)
for step in range(1, STEPS + 2):
    time.sleep(0.05)
    if step == STEPS + 1 and dist.get_rank() == STUCK_RANK:
        print(f"rank {STUCK_RANK} stops itself after step {STEPS}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    dist.all_reduce(weights)  # ALL_REDUCE_LINE
    weights /= dist.get_world_size()
    jobkit.progress()
print(f"rank {dist.get_rank()} finished", flush=True)
