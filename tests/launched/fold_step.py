"""One rank of the step that `jobkit fold` folds (tests/launched/fold.sh, fold_check.py).

usage: fold_step.py MODE SHARED_DIR
  MODE        normal: every rank prints its whole script (below)
              killed: rank 3 prints its config, then a partial line (no newline) to stdout and
                      kills itself with SIGKILL; the others print their whole script
              bad-exit: every rank prints its config; once all have, rank 3 exits with status 3
                      and the others sleep 30 s (srun --kill-on-bad-exit=1 ends them), then go on
  SHARED_DIR  an empty directory that every node sees (not /tmp: each dev-cluster node has its
              own), for the barriers: all ranks start printing at once (a block's window, 1 s by
              default, is then not spent on Python's start on a loaded machine)

The script, what a training job's ranks print: to stdout a 12-line config, the same on every
rank except rank 17's option_7, and a line of the rank's own; to stderr a warning with jobkit's
own prefix `[rank: R] ` on every rank, a warning that rank 5 does not print, and a 4-line
Python traceback whose exception line differs on rank 17. Between lines a random 0-50 ms pause
(20-50 ms where the stream changes, so that srun does not reorder a rank's stdout against its
stderr in a merged stream); a traceback's lines follow one another with no pause, one write and
flush each. fold_check.py imports script() for what each rank printed.
"""
import os
import random
import signal
import sys
import time

CONFIG_LINES = 12
ODD_RANK = 17  # its option_7 and its exception line differ
SKIPPING_RANK = 5  # does not print the dataset warning
DYING_RANK = 3  # killed (killed), exits with 3 (bad-exit)
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "train.py", line 12, in <module>',
    "    main()",
    "ValueError: bad batch",
]


def config(rank):
    lines = []
    for k in range(1, CONFIG_LINES + 1):
        value = f"{k * 10}"
        if k == 7 and rank == ODD_RANK:
            value = "70 (overridden on this rank)"
        lines.append(f"config option_{k} = {value}")
    return lines


def traceback(rank):
    lines = list(TRACEBACK)
    if rank == ODD_RANK:
        lines[-1] = f"ValueError: bad batch on rank {ODD_RANK}"
    return lines


def script(rank, size, mode):
    """What rank does, in order: ("out" | "err", [lines]) writes the lines to that stream (more
    than one: a traceback, with no pause between them); ("partial", text) writes text without a
    newline to stdout; ("barrier", name); ("kill",); ("exit", status); ("sleep", seconds)."""
    steps = [("out", [line]) for line in config(rank)]
    if mode == "killed" and rank == DYING_RANK:
        return steps + [("partial", f"partial line of rank {DYING_RANK}"), ("kill",)]
    if mode == "bad-exit":
        steps.append(("barrier", "config"))
        if rank == DYING_RANK:
            return steps + [("exit", 3)]
        steps.append(("sleep", 30))
    steps.append(("err", [f"[rank: {rank}] WARNING: tokenizer: padding side not set"]))
    if rank != SKIPPING_RANK:
        steps.append(("err", ["WARNING: dataset: 3 files missing"]))
    steps.append(("out", [f"rank {rank} shard {rank * 100}-{rank * 100 + 99}"]))
    steps.append(("err", traceback(rank)))
    return steps


def barrier(shared, name, rank, size, timeout=60.0):
    """Waits until every rank has arrived at barrier name (a file per rank in shared)."""
    directory = os.path.join(shared, name)
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, str(rank)), "w").close()
    deadline = time.monotonic() + timeout
    while len(os.listdir(directory)) < size:
        if time.monotonic() > deadline:
            sys.exit(f"fold_step.py: rank {rank}: barrier {name}: {len(os.listdir(directory))} of {size} "
                     f"ranks after {timeout:.0f} s")
        time.sleep(0.01)


def main():
    mode, shared = sys.argv[1], sys.argv[2]
    if mode not in ("normal", "killed", "bad-exit"):
        sys.exit(f"fold_step.py: unknown mode {mode}")
    rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    streams = {"out": sys.stdout, "err": sys.stderr}
    barrier(shared, "start", rank, size)
    previous = None
    for step in script(rank, size, mode):
        what = step[0]
        if what in streams:
            if previous is not None:
                time.sleep(random.uniform(0.02 if what != previous else 0.0, 0.05))
            for line in step[1]:
                streams[what].write(line + "\n")
                streams[what].flush()
            previous = what
        elif what == "partial":
            sys.stdout.write(step[1])
            sys.stdout.flush()
        elif what == "barrier":
            barrier(shared, step[1], rank, size)
        elif what == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif what == "exit":
            sys.exit(step[1])
        elif what == "sleep":
            time.sleep(step[1])


if __name__ == "__main__":
    main()
