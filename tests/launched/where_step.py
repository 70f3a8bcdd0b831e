"""One rank of the step that `jobkit where` is asked about (tests/launched/where.sh).

usage: where_step.py SECONDS [STUCK_RANKS [TIMEOUT]]
Each rank of STUCK_RANKS (default 5; a comma list) sleeps in load_shard() for SECONDS (outside
jobkit); every other rank waits for them in jobkit.barrier, for TIMEOUT seconds (default SECONDS +
60). Line numbers matter: where.sh checks them (LOAD_LINE, BARRIER_LINE, STEP_LINE).
WHERE_STEP_OWN_SIGNAL=RANK:N: that rank registers its stack dump on signal N (JOBKIT_WHERE_SIGNAL,
set before `import jobkit`), unlike the others and `jobkit where`'s agent.
WHERE_STEP_UNCAUGHT=RANK: that rank sets its stack dump's signal back to SIG_DFL after `import
jobkit`: it no longer catches it, and `jobkit where` must not send it.
"""
import os
import signal
import sys
import time

_rank = os.environ.get("SLURM_PROCID", "")
_own = os.environ.get("WHERE_STEP_OWN_SIGNAL", "").split(":")
if len(_own) == 2 and _own[0] == _rank:
    os.environ["JOBKIT_WHERE_SIGNAL"] = _own[1]

import jobkit  # noqa: E402

if os.environ.get("WHERE_STEP_UNCAUGHT") == _rank:
    signal.signal(int(os.environ.get("JOBKIT_WHERE_SIGNAL") or signal.SIGRTMIN + 6), signal.SIG_DFL)

SECONDS = float(sys.argv[1])
STUCK_RANKS = {int(r) for r in (sys.argv[2] if len(sys.argv) > 2 else "5").split(",")}
TIMEOUT = float(sys.argv[3]) if len(sys.argv) > 3 else SECONDS + 60


def load_shard():
    time.sleep(SECONDS)  # LOAD_LINE


def train_step():
    if jobkit.rank() in STUCK_RANKS:
        load_shard()  # STEP_LINE
    jobkit.barrier(timeout=TIMEOUT)  # BARRIER_LINE


train_step()
