"""One rank of the step that `jobkit where` is asked about (tests/launched/where.sh).

usage: where_step.py SECONDS [STUCK_RANK [TIMEOUT]]
Rank STUCK_RANK (default 5) sleeps in load_shard() for SECONDS (outside jobkit); every other rank
waits for it in jobkit.barrier, for TIMEOUT seconds (default SECONDS + 60). Line numbers matter: where.sh checks them (LOAD_LINE, BARRIER_LINE, STEP_LINE).
"""
import sys
import time

import jobkit

SECONDS = float(sys.argv[1])
STUCK_RANK = int(sys.argv[2]) if len(sys.argv) > 2 else 5
TIMEOUT = float(sys.argv[3]) if len(sys.argv) > 3 else SECONDS + 60


def load_shard():
    time.sleep(SECONDS)  # LOAD_LINE


def train_step():
    if jobkit.rank() == STUCK_RANK:
        load_shard()  # STEP_LINE
    jobkit.barrier(timeout=TIMEOUT)  # BARRIER_LINE


train_step()
