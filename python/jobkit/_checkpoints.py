"""Checkpoints of ``import jobkit``: a checkpoint directory that is never half-written
(jobkit::checkpoints)."""

import os as _os
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Optional as _Optional

from . import _jobkit
from ._timeout import Timeout as _Seconds  # seconds or a timedelta (None: JOBKIT_TIMEOUT)
from ._timeout import timeout_ms as _timeout_ms

if _TYPE_CHECKING:
    from _typeshed import StrPath as _StrPath  # str or os.PathLike[str]

    from ._preemption import StopCause


class Checkpoints:
    """A checkpoint directory that is never half-written (jobkit::checkpoints): begin(step) gives
    this rank's empty directory, commit() makes the step visible on every rank at once (or fails on
    every rank, leaving the previous step the latest), latest() is the newest complete step.
    Collective to create; keep: complete steps kept after a commit (0: all).

    The memory tier (docs/checkpoints-memory.md): ``memory`` a node-local directory (e.g.
    ``/dev/shm/jobkit``; None: ``JOBKIT_CHECKPOINT_MEMORY``, off when unset) where every save also
    keeps each rank's part, with a copy on a partner node; ``shared_every``: every K-th save (the
    first included) also goes to the root; ``memory_keep``: memory steps kept per node (1 or 2);
    ``memory_limit``: bytes per node (None: ``JOBKIT_CHECKPOINT_MEMORY_LIMIT``, else half of the
    free space). latest() then restores from memory or the partner's copy, checked, else from the
    root, and part() names the staged local directory."""

    def __init__(self, root: "_StrPath", keep: int = 2, timeout: _Seconds = None,
                 memory: "_Optional[_StrPath]" = None, shared_every: int = 1, memory_keep: int = 1,
                 memory_limit: _Optional[int] = None) -> None:
        if memory_limit is not None and memory_limit <= 0:
            raise ValueError(f"Checkpoints: memory_limit={memory_limit} is not a positive number of bytes")
        self._c = _jobkit.Checkpoints(_os.fspath(root), keep, _timeout_ms(timeout),
                                      "" if memory is None else _os.fspath(memory), shared_every, memory_keep,
                                      memory_limit or 0)

    def latest(self) -> _Optional[int]:
        """The newest step complete on every file system, the same on every rank, or None. Collective."""
        return self._c.latest()

    def begin(self, step: int) -> str:
        """The empty directory where this rank writes its part of `step`. Not collective."""
        return self._c.begin(step)

    def commit(self, step: _Optional[int] = None) -> None:
        """Collective: flush every rank's part, write the manifest, rename the step into place."""
        self._c.commit(step)

    def verify(self, step: int) -> None:
        """Collective: every rank checks its files of `step` against the manifest (size, CRC-32C)."""
        self._c.verify(step)

    def part(self, step: int) -> str:
        """This rank's part of complete step `step`, to read from."""
        return self._c.part(step)

    def requeue(self, cause: "StopCause") -> bool:
        """Ends a stop every rank agreed on (StopGuard), once its checkpoint is committed, without an
        exit status: collective. Rank 0 asks Slurm to requeue this job, logs the outcome once (a
        warning with Slurm's reason where the job cannot be requeued) and records it for the batch
        script in ``<root>/.stopped-<job>.r<restart>``. True on every rank when the job was
        requeued; the script then exits 0 either way."""
        return self._c.requeue(cause.reason, cause.signal, cause.rank, cause.time_left)

    @property
    def memory_directory(self) -> str:
        """This job's memory directory of this root on this node; "" without the memory tier."""
        return self._c.memory_directory

    @property
    def pending_step(self) -> _Optional[int]:
        return self._c.pending_step

    @property
    def root(self) -> str:
        return self._c.root

    @property
    def is_committer(self) -> bool:
        return self._c.is_committer
