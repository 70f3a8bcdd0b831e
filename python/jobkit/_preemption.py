"""Pre-emption and time limits of ``import jobkit``: the stop decision every rank takes at the same
step (StopGuard, stop_requested), the time the job has left, and a requeue."""

from dataclasses import dataclass as _dataclass
from datetime import timedelta as _timedelta
from typing import Iterable as _Iterable
from typing import Literal as _Literal
from typing import Optional as _Optional
from typing import Union as _Union

from . import _jobkit, _torch_where
from ._timeout import Timeout as _Seconds  # seconds or a timedelta (None: JOBKIT_TIMEOUT)
from ._timeout import duration_ms as _duration_ms
from ._timeout import timeout_ms as _timeout_ms
from ._workspace import _open


@_dataclass(frozen=True)
class StopCause:
    """Why the ranks agreed to stop (jobkit::stop_cause); the same on every rank."""

    reason: str  # "none", "signal" or "time_limit"
    signal: int  # reason "signal": the signal of the lowest rank that received one
    rank: int  # that rank, else -1
    time_left: float  # reason "time_limit": the seconds left rank 0 saw
    text: str  # "SIGTERM on rank 3", "42 s left, below the margin"

    def __str__(self) -> str:
        return self.text


class StopGuard:
    """Catches the stop signals (default SIGTERM, SIGUSR1, SIGUSR2, SIGINT: Slurm's pre-emption,
    ``sbatch --signal``, ``scancel --signal``) while it lives and turns them into one decision that
    every rank takes at the same step (jobkit::stop_guard). Collective to create.

    While a guard lives these signals no longer raise in Python (Ctrl-C does not interrupt a
    wait): the guard records them, and stop_requested() reports them on every rank. The previous
    handlers come back with close() or at the end of a ``with`` block. time_margin: seconds (0:
    none) or a datetime.timedelta, rounded up to whole seconds; 0 or more, finite and at most 1e9.

        with jobkit.StopGuard(time_margin=300) as stop:
            for step in range(start, steps):
                train(step)
                if stop.stop_requested():
                    save(saved.begin(step + 1))
                    saved.commit()
                    saved.requeue(stop.cause)  # rank 0 asks Slurm; exit 0 after it
                    break
    """

    def __init__(self, signals: _Optional[_Iterable[int]] = None, time_margin: "_Union[float, _timedelta]" = 0,
                 check_every: int = 1, timeout: _Seconds = None) -> None:
        # None once closed: a later call fails with InvalidArgumentError
        self._guard: _Optional[_jobkit.StopGuard] = _jobkit.StopGuard(
            None if signals is None else [int(s) for s in signals],
            _duration_ms(time_margin, "time_margin", "StopGuard"), check_every, _timeout_ms(timeout))

    def stop_requested(self) -> bool:
        """Collective (every check_every-th call): True on every rank once any rank received a stop
        signal, or the job has less than time_margin seconds left (asked by rank 0 only)."""
        stop = _open(self._guard, "StopGuard").stop_requested()
        _torch_where.watch_initialized()
        return stop

    @property
    def cause(self) -> StopCause:
        return StopCause(*_open(self._guard, "StopGuard").cause)

    def close(self) -> None:
        self._guard = None

    def __enter__(self) -> "StopGuard":
        return self

    def __exit__(self, *exc: object) -> _Literal[False]:
        self.close()
        return False


_default_stop_guard: _Optional[StopGuard] = None


def stop_requested() -> bool:
    """StopGuard.stop_requested() of a process-wide guard with the default signals, made on the
    first call. Collective over all ranks."""
    global _default_stop_guard
    if _default_stop_guard is None:
        _default_stop_guard = StopGuard()
    return _default_stop_guard.stop_requested()


def time_left(max_age: "_Union[float, _timedelta]" = 60) -> _Optional[float]:
    """Seconds this job has left before its time limit: from SLURM_JOB_END_TIME when set (Slurm
    23.02+), else from Slurm through libslurm in a child process (kept for max_age seconds and
    counted down in between); 0 past the end; None outside Slurm, without a time limit, or when
    libslurm gave no answer. InvalidEnvironmentError when SLURM_JOB_END_TIME is malformed.
    max_age: seconds (0: ask every time) or a datetime.timedelta, rounded up to whole seconds; 0 or
    more, finite and at most 1e9 (InvalidArgumentError otherwise)."""
    return _jobkit.time_left(_duration_ms(max_age, "max_age", "time_left"))


def requeue() -> None:
    """Ask Slurm to requeue this job (an array task alone); SchedulerError when it refuses."""
    _jobkit.requeue()
