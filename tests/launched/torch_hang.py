"""A torch step that waits in torch's own barrier (tests/launched/venv.sh).

usage: torch_hang.py SECONDS STUCK_RANK
Rank STUCK_RANK sleeps in load_shard() for SECONDS; the others wait for it in
torch.distributed.barrier (gloo), started by jobkit.torch.init_process_group. With
JOBKIT_WHERE_REPORT_AFTER below SECONDS, rank 0 logs where every rank is by itself, naming torch's
collective from its flight recorder (where torch has one). Line numbers matter: venv.sh checks them.
"""
import sys
import time

import jobkit.torch
import torch.distributed as dist

SECONDS = float(sys.argv[1])
STUCK_RANK = int(sys.argv[2])


def load_shard():
    time.sleep(SECONDS)  # LOAD_LINE


def train_step():
    if dist.get_rank() == STUCK_RANK:
        load_shard()  # STEP_LINE
    dist.barrier()  # BARRIER_LINE


jobkit.torch.init_process_group("gloo")
train_step()
print(f"torch-where ok {dist.get_rank()}", flush=True)
dist.destroy_process_group()
