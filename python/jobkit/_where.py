"""Where this Python rank is, for ``jobkit where``: every thread's stack on a signal.

At import, in a Slurm step (SLURM_JOB_ID set) and unless JOBKIT_WHERE=0, jobkit registers Python's
``faulthandler`` on JOBKIT_WHERE_SIGNAL (default SIGRTMIN+6, which nothing else in Python, torch or
Slurm uses) to write every thread's stack to ``/dev/shm/jobkit-where.UID.JOB.STEP.PID.py`` (mode
0600), the file ``jobkit where`` reads after it sends the signal. The dump runs in the signal
handler, without the GIL and without stopping the other threads; the process goes on. A handler
already on that signal is left as it is and nothing is registered (``jobkit where`` then reports
what /proc says). The file is removed at exit. The jobkit call in progress is recorded by the C++
library beside it (``jobkit-where.UID.JOB.STEP.PID``).
"""

import atexit
import faulthandler
import os
import signal
from typing import IO, Optional

_file: Optional[IO[bytes]] = None


def _signal_number() -> int:
    value = os.environ.get("JOBKIT_WHERE_SIGNAL", "")
    if value.isdigit() and 1 <= int(value) <= signal.SIGRTMAX:
        return int(value)
    return int(signal.SIGRTMIN) + 6


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def register() -> None:
    """Registers the stack dump (once per process; again in a forked child, with its own file)."""
    global _file
    job = os.environ.get("SLURM_JOB_ID")
    if not job or os.environ.get("JOBKIT_WHERE") == "0" or not os.path.isdir("/dev/shm"):
        return
    number = _signal_number()
    if signal.getsignal(number) not in (signal.SIG_DFL, None):
        return  # someone else's handler
    step = os.environ.get("SLURM_STEP_ID", "none")
    path = f"/dev/shm/jobkit-where.{os.getuid()}.{job}.{step}.{os.getpid()}.py"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    _file = os.fdopen(fd, "wb", buffering=0)
    faulthandler.register(number, file=_file, all_threads=True, chain=False)
    atexit.register(_remove, path)


register()
