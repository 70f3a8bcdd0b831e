"""Where this Python rank is, for ``jobkit where``: every thread's stack on a signal.

At import, where ``jobkit where`` is on (the library's one rule, src/where/settings.hpp: in a Slurm
step, unless JOBKIT_WHERE=0), jobkit registers Python's ``faulthandler`` on JOBKIT_WHERE_SIGNAL
(default SIGRTMIN+6, which nothing else in Python, torch or Slurm uses; read by the same rules) to
write every thread's stack into a memfd named ``jobkit-where-stack:N``, N the signal registered,
which ``jobkit where`` reaches through /proc/PID/fd (as this process's user or root only): it sends
this process that signal, and only while the process catches it (SigCgt in /proc/PID/status). The
dump runs in the signal handler, without the GIL and without stopping the other threads; the
process goes on. A Python handler already on that signal (or SIG_IGN) is left as it is and nothing
is registered (``jobkit where`` then reports what /proc says); a handler installed outside Python
before it started is chained to: it runs after the dump. The memfd ends with the process. The
jobkit call in progress is recorded by the C++ library beside it (the memfd ``jobkit-where``).

Unless JOBKIT_CLI is set, an installed package (a wheel, which carries the ``jobkit`` command)
sets it to that command in the environment's bin/, so that a step's own report (a call that waits
past its threshold runs ``jobkit where``) finds it when the environment is not on PATH, as under
``srun ~/venv/bin/python train.py``.
"""

import faulthandler
import os
import signal
import sysconfig
from typing import IO, Optional

from . import _jobkit

_file: Optional[IO[bytes]] = None


def register() -> None:
    """Registers the stack dump, once per process."""
    global _file
    if _file is not None or not _jobkit.where_enabled():
        return
    number = _jobkit.where_stack_signal()
    previous = signal.getsignal(number)
    if previous is not None and previous != signal.SIG_DFL:
        return  # someone else's Python handler, or SIG_IGN
    # None: a handler from outside Python (the signal module saw it at start): called after the dump.
    chain = previous is None
    try:
        # The name says which signal asks for the dump: `jobkit where` sends no other.
        fd = os.memfd_create(f"jobkit-where-stack:{number}", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return  # no memfd here: `jobkit where` says what /proc says
    _file = os.fdopen(fd, "wb", buffering=0)
    faulthandler.register(number, file=_file, all_threads=True, chain=chain)


def default_cli() -> None:
    """JOBKIT_CLI, unless set: the jobkit command of the environment this package is installed in."""
    if "JOBKIT_CLI" in os.environ:
        return
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    # The environment's own scheme, and pip install --user's.
    for scheme in (None, f"{os.name}_user"):
        try:
            paths = sysconfig.get_paths() if scheme is None else sysconfig.get_paths(scheme)
        except KeyError:
            continue
        installed = {os.path.realpath(paths[name]) for name in ("platlib", "purelib")}
        command = os.path.join(paths["scripts"], "jobkit")
        if package in installed and os.access(command, os.X_OK):  # not a build tree on PYTHONPATH
            os.environ["JOBKIT_CLI"] = command
            return


register()
default_cli()
