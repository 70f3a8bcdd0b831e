"""axolotl's ``axolotl.utils.distributed`` on jobkit.

Port with one import line::

    from jobkit.compat import axolotl as dist   # was: from axolotl.utils import distributed as dist
    from jobkit.compat.axolotl import barrier, zero_first, is_main_process

The functions keep axolotl's names, parameters and return conventions (a list on rank 0 and None
elsewhere for the gathers, the value on every rank for the broadcasts). Underneath they are jobkit's:
the rank comes from the launcher (PMIx), never from LOCAL_RANK or WORLD_SIZE; values travel as exact
pickles, not as float32 tensors; and every wait has a deadline (``timeout=`` in seconds, None: jobkit's
default, JOBKIT_TIMEOUT) and fails with an error naming a rank that died instead of hanging. No torch
process group is needed: the functions work before (and without) torch.distributed's initialisation.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Any, Callable, ContextManager, Iterator, List, Literal, Optional, Type

import jobkit
from jobkit._timeout import Timeout

__all__ = ["barrier", "compute_and_broadcast", "gather_from_all_ranks", "gather_scalar_from_all_ranks",
           "is_distributed", "is_main_process", "reduce_and_broadcast", "zero_first", "zero_only"]


def barrier(*, timeout: Timeout = None) -> None:
    """Returns when every rank has arrived (a no-op on one rank).

    jobkit's host barrier over the launcher's ranks, whether or not torch.distributed is
    initialised; a rank that died or never comes raises jobkit.PeerFailureError or
    jobkit.TimeoutError on the others instead of hanging.
    """
    jobkit.barrier(timeout=timeout)


def compute_and_broadcast(fn: Callable[[], Any], *, timeout: Timeout = None) -> Any:
    """fn() on rank 0 only; its value on every rank.

    The value travels exactly (any picklable object): axolotl sends a float32 tensor, so ints above
    2**24 lose digits and 3.0 comes back as the int 3; here 3.0 stays 3.0 and every int is exact.
    If fn raises on rank 0, the other ranks raise jobkit.PeerFailureError with its message.
    """
    return jobkit.compute_and_broadcast(fn, 0, timeout=timeout)


def _check_world_size(function: str, world_size: int) -> None:
    """world_size is axolotl's gather-list size: 1 (its default) or the step's size."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise jobkit.InvalidArgumentError(f"{function}(world_size={world_size!r}): a number of ranks, >= 1")
    if world_size not in (1, jobkit.world_size()):
        raise jobkit.InvalidArgumentError(f"{function}(world_size={world_size!r}): this step has "
                                          f"{jobkit.world_size()} ranks (jobkit's identity)")


def gather_from_all_ranks(fn: Callable[[], Any], world_size: int = 1, *,
                          timeout: Timeout = None) -> Optional[List[Any]]:
    """fn() on every rank; the values in rank order on rank 0, None on the other ranks.

    world_size is kept for axolotl's signature, but the list always holds every rank's value: the
    default 1 is accepted on any step, another value must be the step's size
    (jobkit.InvalidArgumentError otherwise; axolotl's torch gather fails on a wrong size). Works on
    one rank too ([fn()]), where axolotl's needs an initialised process group.
    """
    _check_world_size("gather_from_all_ranks", world_size)
    return jobkit.gather_from_all_ranks(fn, 0, timeout=timeout)


def gather_scalar_from_all_ranks(fn: Callable[[], Any], world_size: int = 1, *,
                                 timeout: Timeout = None) -> Optional[List[Any]]:
    """fn() on every rank; the values in rank order on rank 0, None on the other ranks.

    As gather_from_all_ranks: world_size as there, and the values exact (axolotl squeezes them
    through float32 and turns whole floats into ints).
    """
    _check_world_size("gather_scalar_from_all_ranks", world_size)
    return jobkit.gather_from_all_ranks(fn, 0, timeout=timeout)


def is_distributed() -> bool:
    """True when the step has more than one rank (jobkit's identity).

    axolotl's means "torch's process group is initialised" and initialises accelerate's state as a
    side effect; this one has no side effect and is True under the launcher before any torch
    initialisation (guard torch.distributed calls with torch.distributed.is_initialized()).
    """
    return jobkit.is_distributed()


def is_main_process() -> bool:
    """True on global rank 0 (True on a single rank).

    axolotl falls back on LOCAL_RANK == 0 before its state exists, so one process per node counts
    as main; jobkit knows the global rank from the launcher, so there is exactly one main.
    """
    return jobkit.is_main_process()


def reduce_and_broadcast(fn1: Callable[[], Any], fn2: Callable[[List[Any]], Any], *,
                         timeout: Timeout = None) -> Any:
    """fn1() on every rank; fn2(list of every rank's value, in rank order) on rank 0; fn2's result
    on every rank. The result travels exactly, not as axolotl's float32."""
    return jobkit.reduce_and_broadcast(fn1, fn2, timeout=timeout)


class _ZeroFirst:
    """zero_first's context manager (a class, so that jobkit's errors name the caller's line).

    One all_gather_object over every rank releases the others: they call it on entry, the first
    ranks on exit (always, even when their block raised), contributing None or their block's error
    text, so each rank makes exactly one collective call per block and no later call mispairs."""

    def __init__(self, is_main: bool, timeout: Timeout) -> None:
        self._is_main = bool(is_main)
        self._timeout = timeout

    def _release(self, error: Optional[str]) -> None:
        """The meeting point; raises PeerFailureError when a first rank's block raised (not on
        the ranks whose own block raised: their exception goes on)."""
        errors = jobkit.all_gather_object(error, timeout=self._timeout)
        failed = [f"rank {rank}: {text}" for rank, text in enumerate(errors) if text is not None]
        if failed and error is None:
            raise jobkit.PeerFailureError("zero_first: the block of a first rank raised, so the others do not run "
                                          "theirs: " + "; ".join(failed))

    def __enter__(self) -> None:
        if not self._is_main:
            self._release(None)

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> Literal[False]:
        if self._is_main:
            self._release(None if kind is None else f"{kind.__name__}: {value}")
        return False


def zero_first(is_main: bool, *, timeout: Timeout = None) -> ContextManager[None]:
    """Context manager: the ranks passing is_main=True run the block first, the others once all of
    those have left it (every rank runs the block).

    As in axolotl the others wait before the block and the first ones after it, on every rank;
    axolotl passes is_local_main_process(), so local rank 0 of every node goes first: pass
    jobkit.is_local_main_process() for that. Unlike axolotl's barriers, the wait carries each first
    rank's outcome: if a first rank's block raises (even if the caller catches it), the others raise
    jobkit.PeerFailureError naming that rank and its error at the ``with`` instead of running their
    block, and so do the first ranks whose block succeeded, when they leave it; a rank that dies or
    never comes gives jobkit.PeerFailureError or jobkit.TimeoutError instead of a hang.
    """
    if callable(is_main) or is_main is None:
        raise jobkit.InvalidArgumentError(f"zero_first(is_main={is_main!r}): a bool, True on the ranks that go "
                                          "first")
    return _ZeroFirst(is_main, timeout)


@contextlib.contextmanager
def zero_only() -> Iterator[bool]:
    """Context manager meant to run its block on the main rank only; yields is_main_process().

    A context manager cannot skip its block: axolotl's ran it on every rank (and axolotl removed
    it). This one does the same but yields whether this rank is the main one, so the block can
    test it (``with zero_only() as main: if main: ...``); ``if is_main_process():`` is simpler.
    """
    yield jobkit.is_main_process()
