"""Progress marks of ``import jobkit`` (docs/progress.md): where a step ends, for the hang watcher
and the straggler scores, in a program that neither uses the stop agreement (StopGuard,
stop_requested: each call is a step boundary already) nor makes a jobkit collective per step."""

from . import _jobkit, _torch_where
from ._timeout import Duration as _Duration
from ._timeout import duration_ms as _duration_ms


def progress() -> None:
    """Marks the end of a step on this rank (not collective). Once called, jobkit's collectives no
    longer count as this program's step boundaries; a stop agreement still does. Does nothing
    without progress tracking (outside a Slurm step, or JOBKIT_PROGRESS=0). Raises
    InvalidEnvironmentError naming a malformed JOBKIT_PROGRESS* or JOBKIT_STRAGGLER_* variable."""
    _jobkit.progress()
    _torch_where.watch_initialized()


def long_step(bound: _Duration) -> None:
    """Says that the current step (until the next boundary) may take up to ``bound`` (seconds or a
    timedelta) without counting as a hang: an evaluation, a save outside Checkpoints. That step is
    not learned. Raises InvalidArgumentError for a negative or non-finite bound."""
    _jobkit.long_step(_duration_ms(bound, "bound", "long_step"))
