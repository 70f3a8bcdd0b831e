"""jobkit for Python: the identity, helpers and collectives of the C++ library jobkit.

Every function is a binding of the C++ library (the extension ``jobkit._jobkit``): the same
identity discovery (PMIx, then Slurm, then torchrun variables, then single-rank defaults), the same
TCP data path set up through the launcher, the same deadlines (``timeout`` in seconds; None: the
default, JOBKIT_TIMEOUT) and failures that reach every rank. Objects travel as pickles.

Waiting releases the GIL, and a signal handler's exception (Ctrl-C's KeyboardInterrupt) ends a
wait; the world group is then failed for the other ranks, as a rank that left a collective half
done cannot pair with them again. jobkit's errors are ``jobkit.Error`` subclasses named after
their category, and their messages name the rank, its host and the Python caller's file:line.
As in C++, a failed collective leaves the world group unusable in this process, and one collective
at a time: do not call collectives from two threads at once.
"""

import functools as _functools
import math as _math
import os as _os
import pickle as _pickle
from dataclasses import dataclass as _dataclass
from datetime import timedelta as _timedelta
from types import TracebackType as _TracebackType
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any
from typing import Callable as _Callable
from typing import ContextManager as _ContextManager
from typing import Iterable as _Iterable
from typing import List as _List
from typing import Literal as _Literal
from typing import Mapping as _Mapping
from typing import Optional as _Optional
from typing import Sequence as _Sequence
from typing import Tuple as _Tuple
from typing import Type as _Type
from typing import TypeVar as _TypeVar
from typing import Union as _Union
from typing import cast as _cast
from typing import overload as _overload

from . import _jobkit
from ._jobkit import (
    CudaError,
    Error,
    InternalError,
    InvalidArgumentError,
    InvalidEnvironmentError,
    IoError,
    NcclError,
    PeerFailureError,
    PmixError,
    SchedulerError,
    TimeoutError as TimeoutError,  # explicit re-export: reachable as jobkit.TimeoutError, not in __all__
    __version__,
)
from ._logging import RankFilter, RankFormatter, install_logging, rank_zero_info, rank_zero_only, rank_zero_warn

_jobkit.set_package_dir(_os.path.dirname(_os.path.abspath(__file__)))

_PROTOCOL = _pickle.HIGHEST_PROTOCOL

if _TYPE_CHECKING:
    from _typeshed import ReadableBuffer as _ReadableBuffer  # bytes, bytearray, memoryview, array.array, ...
    from _typeshed import StrPath as _StrPath  # str or os.PathLike[str]
    from typing_extensions import ParamSpec as _ParamSpec  # typing's from Python 3.10; type checkers only

    _P = _ParamSpec("_P")
_T = _TypeVar("_T")
_U = _TypeVar("_U")
_H = _TypeVar("_H")
# Workspace's and node_local_gather's group: None or "world" (every rank), "node", world ranks or a Group
_Members = _Union[None, _Literal["world", "node"], _Sequence[int], "Group"]  # noqa: F821  (Literal's strings are no names)


# ---- Identity ----


@_dataclass(frozen=True)
class Identity:
    """Who this process is in its job step (jobkit::identity)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    hostname: str
    job_id: str
    step_id: str
    restart_count: int  # SLURM_RESTART_COUNT: how often Slurm requeued this job
    array_job_id: str  # "" outside an array job
    array_task_id: int  # -1 outside an array job
    source: str  # "pmix", "pmi2", "slurm", "torchrun" or "default"

    def is_main_process(self) -> bool:
        """Global rank 0."""
        return self.rank == 0

    def is_local_main_process(self) -> bool:
        """Local rank 0: the first rank of its node."""
        return self.local_rank == 0

    def is_distributed(self) -> bool:
        """More than one rank in the step."""
        return self.world_size > 1


_identity: _Optional[Identity] = None


def identity() -> Identity:
    """This process's Identity, discovered once: PMIx, then PMI-2, then Slurm, then torchrun
    variables, then single-rank defaults (docs/environment.md)."""
    global _identity
    if _identity is None:
        _identity = Identity(*_jobkit.identity())
    return _identity


def rank() -> int:
    """This process's global rank."""
    return identity().rank


def world_size() -> int:
    """The number of ranks in the step."""
    return identity().world_size


def local_rank() -> int:
    """This process's rank among the ranks of its node."""
    return identity().local_rank


def local_world_size() -> int:
    """The number of ranks on this process's node."""
    return identity().local_world_size


def node_rank() -> int:
    """The index of this process's node among the step's nodes."""
    return identity().node_rank


def num_nodes() -> int:
    """The number of nodes of the step."""
    return identity().num_nodes


def is_main_process() -> bool:
    """True on global rank 0."""
    return identity().rank == 0


def is_local_main_process() -> bool:
    """True on local rank 0 of every node."""
    return identity().local_rank == 0


def is_distributed() -> bool:
    """True when the step has more than one rank."""
    return identity().world_size > 1


def rank_prefixed_message(message: object) -> str:
    """``"[rank: R] message"``; the message unchanged without a launcher."""
    return _jobkit.rank_prefixed_message(str(message))


def select_device(visible_count: _Optional[int] = None, local_rank: _Optional[int] = None,
                  local_world_size: _Optional[int] = None) -> str:
    """This rank's device by jobkit's device rule (``jobkit::nccl::select_device``): ``"cuda:N"``,
    or ``"cpu"`` where this process sees no CUDA device; usable like SpeechBrain's infer_device.

    The rule honours Slurm's GPU binding: a task that sees one device (``srun --gpus-per-task=1``:
    Slurm sets CUDA_VISIBLE_DEVICES per task) uses ``cuda:0`` whatever its local rank; a task that
    sees at least as many devices as its node has ranks uses ``cuda:<local rank>``. Between the two
    (more than one, fewer than the node's ranks) no device is its own: jobkit.InvalidEnvironmentError
    naming the rank, CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS.

    visible_count: the CUDA devices this process sees (None: ``torch.cuda.device_count()``, which
    needs torch); local_rank, local_world_size: None for this process's identity.
    """
    if visible_count is None:
        try:
            import torch
        except ImportError as e:
            raise InvalidArgumentError("select_device(): torch is not installed here to count the CUDA devices: "
                                       "pass visible_count=") from e
        visible_count = int(torch.cuda.device_count())
    if visible_count < 0:
        raise InvalidArgumentError(f"select_device(visible_count={visible_count}): a count of devices, >= 0")
    if visible_count == 0:
        return "cpu"
    me = identity()
    index = _jobkit.select_device(visible_count, me.local_rank if local_rank is None else local_rank,
                                  me.local_world_size if local_world_size is None else local_world_size)
    return f"cuda:{index}"


# ---- Collectives: objects, numbers and arrays in place, over the world or a Group ----

from ._collectives import (  # noqa: E402  (the extension is set up above)
    Group,
    all_gather,
    all_gather_into,
    all_gather_into_tensor,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_into,
    broadcast_object,
    compute_and_broadcast,
    gather,
    gather_from_all_ranks,
    gather_object,
    make_group,
    node_group,
    node_leaders_group,
    reduce_and_broadcast,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
    scatter_object,
)
from ._collectives import Timeout as _Seconds  # noqa: E402  seconds or a timedelta (None: JOBKIT_TIMEOUT)
from ._collectives import _seconds  # noqa: E402


# ---- Who runs what ----
#
# Nesting follows the C++ rule (jobkit/helpers.hpp): a helper nested in main_process_only /
# run_on_main, or once-per-node helpers nested in once_per_node, just run their function; other
# nestings, and a world collective inside a section that some ranks skip, raise
# jobkit.InvalidArgumentError at once instead of hanging.


def _call(func: _Callable[..., _T], args: _Optional[_Iterable[_Any]], kwargs: _Optional[_Mapping[str, _Any]]) -> _T:
    return func(*(args or ()), **(kwargs or {}))


def _check_args(helper: str, args: object) -> None:
    if callable(args):
        raise InvalidArgumentError(f"{helper}: args is a callable; SpeechBrain's signature is "
                                   f"{helper}(func, args=None, kwargs=None, post_func=None, ...): "
                                   "pass post_func= by name")


@_overload
def main_process_only(function: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _T]":
    ...


@_overload
def main_process_only(function: None = None, *,
                      timeout: _Seconds = None) -> "_Callable[[_Callable[_P, _T]], _Callable[_P, _T]]":
    ...


def main_process_only(
        function: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None
) -> "_Union[_Callable[_P, _T], _Callable[[_Callable[_P, _T]], _Callable[_P, _T]]]":
    """Decorator: the function runs on the main rank only; every rank returns its result
    (SpeechBrain's main_process_only). ``@main_process_only`` or ``@main_process_only(timeout=60)``."""
    def decorate(fn: "_Callable[_P, _T]") -> "_Callable[_P, _T]":
        @_functools.wraps(fn)
        def wrapper(*args: "_P.args", **kwargs: "_P.kwargs") -> _T:
            holder: _List[_T] = []

            def run() -> bytes:
                holder.append(fn(*args, **kwargs))
                return _pickle.dumps(holder[0], _PROTOCOL)

            data = _jobkit.main_process_only_bytes(run, _seconds(timeout))
            return holder[0] if holder else _cast(_T, _pickle.loads(data))

        return wrapper

    return decorate(function) if function is not None else decorate


def run_on_main(func: _Callable[..., _T], args: _Optional[_Iterable[_Any]] = None,
                kwargs: _Optional[_Mapping[str, _Any]] = None, post_func: _Optional[_Callable[..., object]] = None,
                post_args: _Optional[_Iterable[_Any]] = None, post_kwargs: _Optional[_Mapping[str, _Any]] = None,
                run_post_on_main: bool = False, timeout: _Seconds = None) -> _T:
    """SpeechBrain's run_on_main: func on the main rank, a barrier, then post_func on the other
    ranks followed by a barrier (or on every rank at once, no barrier, with run_post_on_main).
    Returns func's result on every rank."""
    _check_args("run_on_main", args)
    holder: _List[_T] = []

    def run() -> bytes:
        holder.append(_call(func, args, kwargs))
        return _pickle.dumps(holder[0], _PROTOCOL)

    def post() -> None:
        if post_func is not None:
            _call(post_func, post_args, post_kwargs)

    data = _jobkit.run_on_main_bytes(run, post, run_post_on_main, _seconds(timeout))
    return holder[0] if holder else _cast(_T, _pickle.loads(data))


@_overload
def once_per_node(function: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _Optional[_T]]":
    ...


@_overload
def once_per_node(function: None = None, *,
                  timeout: _Seconds = None) -> "_Callable[[_Callable[_P, _T]], _Callable[_P, _Optional[_T]]]":
    ...


def once_per_node(
        function: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None
) -> "_Union[_Callable[_P, _Optional[_T]], _Callable[[_Callable[_P, _T]], _Callable[_P, _Optional[_T]]]]":
    """Decorator: the function runs on local rank 0 of every node, which returns its result; the
    other ranks wait for their node's runner and return None (SpeechBrain's once_per_node). An
    exception on the runner reaches the node's other ranks as jobkit.PeerFailureError."""
    def decorate(fn: "_Callable[_P, _T]") -> "_Callable[_P, _Optional[_T]]":
        @_functools.wraps(fn)
        def wrapper(*args: "_P.args", **kwargs: "_P.kwargs") -> _Optional[_T]:
            holder: _List[_Optional[_T]] = [None]

            def run() -> None:
                holder[0] = fn(*args, **kwargs)

            _jobkit.once_per_node(run, _seconds(timeout))
            return holder[0]

        return wrapper

    return decorate(function) if function is not None else decorate


def run_once_per_node(func: _Callable[..., _T], args: _Optional[_Iterable[_Any]] = None,
                      kwargs: _Optional[_Mapping[str, _Any]] = None, post_func: _Optional[_Callable[..., _U]] = None,
                      post_args: _Optional[_Iterable[_Any]] = None, post_kwargs: _Optional[_Mapping[str, _Any]] = None,
                      run_post_on_all: bool = False, timeout: _Seconds = None) -> _Union[_T, _U, None]:
    """SpeechBrain's run_once_per_node: func on local rank 0 of every node, a barrier over all
    ranks, then post_func on the other ranks followed by a barrier (or on every rank, no barrier,
    with run_post_on_all). Returns func's result where it ran, replaced by post_func's where that
    ran (None elsewhere)."""
    _check_args("run_once_per_node", args)
    holder: _List[_Union[_T, _U, None]] = [None]

    def run() -> None:
        holder[0] = _call(func, args, kwargs)

    def post() -> None:
        if post_func is not None:
            holder[0] = _call(post_func, post_args, post_kwargs)

    _jobkit.run_once_per_node(run, post, run_post_on_all, _seconds(timeout))
    return holder[0]


class _FirstThenOthers:
    """What zero_first and local_zero_first return: a callable (with fn) or a context manager
    (without); the public types are their overloads'."""

    def __init__(self, per_node: bool, fn: _Optional[_Callable[..., _Any]], timeout: _Seconds) -> None:
        self._per_node = per_node
        self._fn = fn
        self._timeout = timeout
        self._stage: _Optional[_jobkit.FirstThenOthers] = None

    def __call__(self, *args: _Any, **kwargs: _Any) -> _Any:
        holder: _List[_Any] = [None]

        def run() -> None:
            holder[0] = _cast(_Callable[..., _Any], self._fn)(*args, **kwargs)  # fn is None: misuse, a TypeError

        (_jobkit.local_zero_first if self._per_node else _jobkit.zero_first)(run, _seconds(self._timeout))
        return holder[0]

    def __enter__(self) -> "_FirstThenOthers":
        if self._fn is not None:
            raise InvalidArgumentError("zero_first(fn) is called, not entered: use `with zero_first():`")
        if self._stage is not None:
            raise InvalidArgumentError("this zero_first() is entered already: write `with zero_first():` for each block")
        self._stage = _jobkit.FirstThenOthers(self._per_node, _seconds(self._timeout))
        self._stage.enter()
        return self

    def __exit__(self, kind: _Optional[_Type[BaseException]], value: _Optional[BaseException],
                 traceback: _Optional[_TracebackType]) -> _Literal[False]:
        stage, self._stage = self._stage, None  # set by __enter__, which refuses a second entry
        _cast(_jobkit.FirstThenOthers, stage).exit(None if kind is None else f"{kind.__name__}: {value}")
        return False


@_overload
def zero_first(fn: None = None, *, timeout: _Seconds = None) -> _ContextManager[_FirstThenOthers]:
    ...


@_overload
def zero_first(fn: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _T]":
    ...


def zero_first(fn: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None) -> _FirstThenOthers:
    """Rank 0 first, then every other rank (released when rank 0 is done).

    Two forms:
      ``with jobkit.zero_first(): body`` -- every rank runs the body; the others start it when
      rank 0 has left the block. A context manager cannot skip its body: if rank 0's body raises,
      the others do not wait for a deadline but raise jobkit.PeerFailureError at the ``with``.
      ``jobkit.zero_first(fn)`` -- returns a callable; calling it runs fn the same way and returns
      fn's result on each rank. This form skips fn on the other ranks when rank 0's fn raised
      (they raise jobkit.PeerFailureError instead), as the C++ helper does.
    axolotl's zero_first(is_main) takes the "first" predicate; here it is rank 0 (local rank 0 of
    every node: local_zero_first), and the barrier is the group's, never a global one per node.
    """
    return _FirstThenOthers(False, fn, timeout)


@_overload
def local_zero_first(fn: None = None, *, timeout: _Seconds = None) -> _ContextManager[_FirstThenOthers]:
    ...


@_overload
def local_zero_first(fn: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _T]":
    ...


def local_zero_first(fn: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None) -> _FirstThenOthers:
    """zero_first per node: local rank 0 of each node first, then that node's other ranks; nodes
    do not wait for each other. The same two forms as zero_first."""
    return _FirstThenOthers(True, fn, timeout)


def do_n_at_a_time(f: _Callable[[], _T], *, n: _Optional[int] = None, timeout: _Seconds = None) -> _T:
    """f() on every rank, at most n ranks at a time; each rank returns its own f()'s result.

    n=None: one rank per node at a time on any layout (cyclic and uneven included), where
    OLMo-core's default (n = number of nodes, rank % rounds) is one per node only on block layouts.
    """
    holder: _List[_Optional[_T]] = [None]

    def run() -> None:
        holder[0] = f()

    _jobkit.do_n_at_a_time(run, n, _seconds(timeout))
    return _cast(_T, holder[0])  # run ran on every rank, or do_n_at_a_time raised


def fs_local_rank(directory: "_StrPath" = ".", timeout: _Seconds = None) -> int:
    """0 on exactly one rank per file system holding `directory`, counting up on the others.
    FS_LOCAL_RANK and OLMO_SHARED_FS=1 override as in OLMo-core; otherwise jobkit probes the
    directory (OLMo-core assumes: local rank, or global rank with OLMO_SHARED_FS). Collective."""
    return _jobkit.fs_local_rank(_os.fspath(directory), _seconds(timeout))


# ---- Workspace and node-local gather (bytes) ----


def _members(group: _Members) -> _Union[None, str, _List[int]]:
    """A Workspace's or node_local_gather's group= for the extension: a Group as its world ranks."""
    if isinstance(group, Group):
        return group.world_ranks
    if group is None or isinstance(group, str):
        return group
    return [int(r) for r in group]


def _payload(payload: "_ReadableBuffer") -> bytes:
    """payload's bytes; an int is refused (bytes(5) would be five zero bytes)."""
    if isinstance(payload, int):
        raise InvalidArgumentError(f"payload={payload!r}: bytes or another buffer, not an int")
    return bytes(payload)


def _open(handle: "_Optional[_H]", what: str) -> "_H":
    """handle, unless `what` was closed."""
    if handle is None:
        raise InvalidArgumentError(f"this {what} is closed (close() or the end of its with block)")
    return handle


class Workspace:
    """A shared directory where each rank leaves a state (config text + payload bytes) for the
    others (jobkit::workspace). Collective to create; close() (or the end of a ``with`` block)
    removes this rank's files; the last rank's, the directory. Close it when no rank reads anymore
    (e.g. after a barrier).

    group: None (every rank), "node", a list of world ranks, or a jobkit.Group.
    """

    def __init__(self, root: "_StrPath", group: _Members = None, timeout: _Seconds = None) -> None:
        # None once closed: a later call fails with InvalidArgumentError
        self._ws: _Optional[_jobkit.Workspace] = _jobkit.Workspace(_os.fspath(root), _members(group), _seconds(timeout))

    def write(self, payload: "_ReadableBuffer", config: str = "") -> None:
        _open(self._ws, "Workspace").write(_payload(payload), config)

    def read(self, rank: int, timeout: _Seconds = None) -> _Tuple[str, bytes]:
        """(config, payload) of group rank `rank`, waiting until it exists."""
        return _open(self._ws, "Workspace").read(rank, _seconds(timeout))

    def path_of(self, rank: int) -> str:
        return _open(self._ws, "Workspace").path_of(rank)

    @property
    def directory(self) -> str:
        return _open(self._ws, "Workspace").directory

    def close(self) -> None:
        self._ws = None

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> _Literal[False]:
        self.close()
        return False


def node_local_gather(payload: "_ReadableBuffer", config: str = "", group: _Members = None,
                      workspace: "_Optional[_StrPath]" = None, collective_max_bytes: int = 4 << 20,
                      timeout: _Seconds = None) -> _Tuple[_List[_Tuple[str, bytes]], str]:
    """Every member's (config, payload) to the group's rank 0, in group-rank order, through
    shared memory on one node, else collectives or a workspace under `workspace` for large states.
    Returns (states, route): states is a list on the group's rank 0 and [] elsewhere; route is
    "shared_memory", "workspace" or "collectives"."""
    where = "" if workspace is None else _os.fspath(workspace)
    return _jobkit.node_local_gather(_payload(payload), config, _members(group), where, collective_max_bytes, _seconds(timeout))


# ---- Pre-emption, time limits, requeue and checkpoints ----


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
    handlers come back with close() or at the end of a ``with`` block.

        with jobkit.StopGuard(time_margin=300) as stop:
            for step in range(start, steps):
                train(step)
                if stop.stop_requested():
                    save(step + 1)
                    sys.exit(75)
    """

    def __init__(self, signals: _Optional[_Iterable[int]] = None, time_margin: float = 0, check_every: int = 1,
                 timeout: _Seconds = None) -> None:
        # None once closed: a later call fails with InvalidArgumentError
        self._guard: _Optional[_jobkit.StopGuard] = _jobkit.StopGuard(
            None if signals is None else [int(s) for s in signals], float(time_margin), check_every, _seconds(timeout))

    def stop_requested(self) -> bool:
        """Collective (every check_every-th call): True on every rank once any rank received a stop
        signal, or the job has less than time_margin seconds left (asked by rank 0 only)."""
        return _open(self._guard, "StopGuard").stop_requested()

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
    max_age: seconds (0: ask every time) or a datetime.timedelta, rounded up to whole seconds."""
    seconds = max_age.total_seconds() if isinstance(max_age, _timedelta) else max_age
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not _math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"time_left(max_age={max_age!r}): seconds, 0 or more, or a datetime.timedelta")
    return _jobkit.time_left(float(_math.ceil(seconds)))


def requeue() -> None:
    """Ask Slurm to requeue this job (an array task alone); SchedulerError when it refuses."""
    _jobkit.requeue()


class Checkpoints:
    """A checkpoint directory that is never half-written (jobkit::checkpoints): begin(step) gives
    this rank's empty directory, commit() makes the step visible on every rank at once (or fails on
    every rank, leaving the previous step the latest), latest() is the newest complete step.
    Collective to create; keep: complete steps kept after a commit (0: all)."""

    def __init__(self, root: "_StrPath", keep: int = 2, timeout: _Seconds = None) -> None:
        self._c = _jobkit.Checkpoints(_os.fspath(root), keep, _seconds(timeout))

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

    @property
    def pending_step(self) -> _Optional[int]:
        return self._c.pending_step

    @property
    def root(self) -> str:
        return self._c.root

    @property
    def is_committer(self) -> bool:
        return self._c.is_committer


# `from jobkit import *` shadows no built-in: jobkit.TimeoutError (a subclass of the built-in
# TimeoutError) stays reachable by its qualified name but is not exported.
__all__: _List[str] = [
    "Error", "InvalidEnvironmentError", "InvalidArgumentError", "PmixError", "PeerFailureError",
    "NcclError", "CudaError", "IoError", "SchedulerError", "InternalError", "Identity", "identity", "rank",
    "world_size", "local_rank", "local_world_size", "node_rank", "num_nodes", "is_main_process",
    "is_local_main_process", "is_distributed", "rank_prefixed_message", "select_device", "RankFilter",
    "RankFormatter", "install_logging", "rank_zero_only", "rank_zero_info", "rank_zero_warn",
    "barrier", "broadcast_object", "all_gather_object", "broadcast_into", "all_gather_into", "gather_object",
    "scatter_object", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "scatter", "Group", "make_group", "node_group", "node_leaders_group",
    "compute_and_broadcast", "gather_from_all_ranks", "reduce_and_broadcast", "main_process_only",
    "run_on_main", "once_per_node", "run_once_per_node", "zero_first", "local_zero_first", "do_n_at_a_time",
    "fs_local_rank", "Workspace", "node_local_gather", "__version__",
    "StopCause", "StopGuard", "stop_requested", "time_left", "requeue", "Checkpoints",
]
