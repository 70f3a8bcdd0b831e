"""SpeechBrain's ``speechbrain.utils.distributed`` on jobkit.

Port with one import line::

    from jobkit.compat import speechbrain as dist   # was: from speechbrain.utils import distributed as dist
    from jobkit.compat.speechbrain import run_on_main, if_main_process, ddp_barrier

The functions keep SpeechBrain's names, parameters and return conventions, including its deadlock
guard: inside a main-only or once-per-node section (MainProcessContext, OncePerNodeContext, which
main_process_only, run_on_main, once_per_node and run_once_per_node enter) ddp_barrier, ddp_broadcast
and ddp_all_reduce return at once. Underneath they are jobkit's: the rank comes from the launcher
(PMIx), never from RANK, LOCAL_RANK or SLURM_PROCID; objects travel as pickles over jobkit's data
path; and every wait has a deadline (``timeout=`` in seconds, None: JOBKIT_TIMEOUT) and fails with an
error naming a rank that died instead of hanging. No torch process group is needed, except for
ddp_all_reduce on CUDA tensors (torch.distributed, initialised by ddp_init_group; the routing
rule is jobkit.compat._route's).
"""

from __future__ import annotations

import datetime
import functools
from types import TracebackType
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Type, TypeVar, Union

import jobkit
from jobkit._timeout import Timeout

from ._route import NOTHING, torch_dist, torch_op

__all__ = ["MainProcessContext", "OncePerNodeContext", "ddp_all_reduce", "ddp_barrier", "ddp_broadcast",
           "ddp_init_group", "ddp_prevent_block", "get_local_rank", "get_rank", "if_main_process", "infer_device",
           "is_distributed_initialized", "is_local_rank_zero", "main_process_only", "once_per_node",
           "rank_prefixed_message", "run_on_main", "run_once_per_node"]

_T = TypeVar("_T")
_U = TypeVar("_U")

MAIN_PROC_ONLY: int = 0  # main-only sections this process is inside of (SpeechBrain's counter)
NODE_ONCE_ONLY: int = 0  # once-per-node sections this process is inside of


def rank_prefixed_message(message: str) -> str:
    """``"[rank: R] message"``; the message unchanged without a launcher."""
    return jobkit.rank_prefixed_message(message)


def get_rank() -> Optional[int]:
    """This process's global rank from the launcher (PMIx, Slurm, torchrun), or None without one.

    SpeechBrain reads RANK, LOCAL_RANK, SLURM_PROCID or JSM_NAMESPACE_RANK and may take a local
    rank for the global one; jobkit asks the launcher.
    """
    return None if jobkit.identity().source == "default" else jobkit.rank()


def get_local_rank() -> Optional[int]:
    """This process's rank on its node from the launcher, or None without one (SpeechBrain reads
    LOCAL_RANK only, so it gives None under srun)."""
    return None if jobkit.identity().source == "default" else jobkit.local_rank()


def infer_device() -> str:
    """This rank's device by jobkit's device rule: ``"cuda:N"``, or ``"cpu"`` where no CUDA device
    is visible (torch counts them).

    SpeechBrain uses cuda:LOCAL_RANK, which fails under Slurm's one-GPU-per-task binding for every
    local rank above 0; jobkit.select_device uses cuda:0 where the task sees one device, and
    cuda:<local rank> where it sees at least as many as its node has ranks. A task that sees
    more than one device but fewer than its node's ranks has none of its own:
    jobkit.InvalidEnvironmentError (SpeechBrain returns a cuda:LOCAL_RANK that may not exist).
    """
    import torch

    return jobkit.select_device(int(torch.cuda.device_count()))


def is_distributed_initialized() -> bool:
    """True when the step has more than one rank (jobkit's identity).

    SpeechBrain's means "torch's process group is initialised"; jobkit's collectives need no torch
    initialisation, so this is True under a launcher from the start (guard torch.distributed calls
    with torch.distributed.is_initialized()).
    """
    return jobkit.is_distributed()


def if_main_process() -> bool:
    """True on global rank 0, and on a single rank."""
    return jobkit.is_main_process()


def is_local_rank_zero() -> bool:
    """True on local rank 0 of every node, and on a single rank."""
    return jobkit.is_local_main_process()


class MainProcessContext:
    """Context manager marking a main-only section: while inside, ddp_barrier, ddp_broadcast and
    ddp_all_reduce return at once (main_process_only and run_on_main enter it around their function)."""

    def __enter__(self) -> MainProcessContext:
        global MAIN_PROC_ONLY
        MAIN_PROC_ONLY += 1
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        global MAIN_PROC_ONLY
        MAIN_PROC_ONLY -= 1


class OncePerNodeContext:
    """Context manager marking a once-per-node section, as MainProcessContext (once_per_node and
    run_once_per_node enter it around their function)."""

    def __enter__(self) -> OncePerNodeContext:
        global NODE_ONCE_ONLY
        NODE_ONCE_ONLY += 1
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        global NODE_ONCE_ONLY
        NODE_ONCE_ONLY -= 1


def _inside(context: Callable[[], Any], func: Callable[..., _T]) -> Callable[..., _T]:
    """func, run inside a fresh `context` section, under func's name and docstring."""
    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> _T:
        with context():
            return func(*args, **kwargs)

    return run


def _in_section() -> bool:
    """Inside a main-only or once-per-node section: the ranks do not all get here."""
    return MAIN_PROC_ONLY >= 1 or NODE_ONCE_ONLY >= 1


def ddp_prevent_block() -> bool:
    """True inside a main-only or once-per-node section, or on a single rank: where ddp_all_reduce
    returns its object unchanged (ddp_barrier and ddp_broadcast still check their arguments on a
    single rank)."""
    return _in_section() or not jobkit.is_distributed()


def main_process_only(function: Callable[..., _T]) -> Callable[..., _T]:
    """Decorator: the function runs on the main rank only (inside MainProcessContext); every rank
    returns its result (which must be picklable). If it raises, the main rank re-raises it and the
    others raise jobkit.PeerFailureError with its message instead of hanging. Inside a once-per-node
    section, where SpeechBrain's returns None on the node leaders but rank 0, it raises
    jobkit.InvalidArgumentError (jobkit's nesting rule); nested in a main-only section it just runs."""
    return jobkit.main_process_only(_inside(MainProcessContext, function))


def once_per_node(function: Callable[..., _T]) -> Callable[..., Optional[_T]]:
    """Decorator: the function runs on local rank 0 of every node (inside OncePerNodeContext), which
    returns its result; the node's other ranks wait for it and return None."""
    return jobkit.once_per_node(_inside(OncePerNodeContext, function))


def run_on_main(func: Callable[..., _T], args: Optional[Iterable[Any]] = None,
                kwargs: Optional[Mapping[str, Any]] = None, post_func: Optional[Callable[..., object]] = None,
                post_args: Optional[Iterable[Any]] = None, post_kwargs: Optional[Mapping[str, Any]] = None,
                run_post_on_main: bool = False, *, timeout: Timeout = None) -> _T:
    """func on the main rank (inside MainProcessContext), a barrier, then post_func on the other
    ranks followed by a barrier (or on every rank, without a barrier, with run_post_on_main).
    Returns func's result on every rank; post_func's result is dropped.

    A failure on one rank reaches the others as jobkit.PeerFailureError instead of a hang.
    """
    return jobkit.run_on_main(_inside(MainProcessContext, func), args, kwargs, post_func, post_args, post_kwargs,
                              run_post_on_main, timeout)


def run_once_per_node(func: Callable[..., _T], args: Optional[Iterable[Any]] = None,
                      kwargs: Optional[Mapping[str, Any]] = None, post_func: Optional[Callable[..., _U]] = None,
                      post_args: Optional[Iterable[Any]] = None, post_kwargs: Optional[Mapping[str, Any]] = None,
                      run_post_on_all: bool = False, *, timeout: Timeout = None) -> Union[_T, _U, None]:
    """func on local rank 0 of every node (inside OncePerNodeContext), a barrier over every rank,
    then post_func on the other ranks followed by a barrier (or on every rank, without a barrier,
    with run_post_on_all).

    Returns post_func's result where post_func ran, else func's where func ran, else None.
    """
    return jobkit.run_once_per_node(_inside(OncePerNodeContext, func), args, kwargs, post_func, post_args,
                                    post_kwargs, run_post_on_all, timeout)


def ddp_barrier(*, timeout: Timeout = None) -> None:
    """Returns when every rank has arrived; at once inside a main-only or once-per-node section.

    jobkit's host barrier over the launcher's ranks, also before torch.distributed is initialised;
    a rank that died or never comes raises jobkit.PeerFailureError or jobkit.TimeoutError instead
    of hanging.
    """
    if not _in_section():
        jobkit.barrier(timeout=timeout)


def _check_src(src: int) -> None:
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < jobkit.world_size():
        raise jobkit.InvalidArgumentError(f"ddp_broadcast(src={src!r}): a rank, 0 <= src < {jobkit.world_size()}")


def ddp_broadcast(communication_object: Any, src: int = 0, *, timeout: Timeout = None) -> Any:
    """communication_object of rank src on every rank (pickled; src gets its own object back).
    Inside a main-only or once-per-node section it returns communication_object unchanged."""
    _check_src(src)
    if _in_section():
        return communication_object
    return jobkit.broadcast_object(communication_object, src, timeout=timeout)


def ddp_all_reduce(communication_object: Any, reduce_op: Any, *, timeout: Timeout = None) -> Any:
    """communication_object reduced over every rank with reduce_op (torch.distributed.ReduceOp or a
    name: "sum", "avg", ...), and returned.

    A tensor is reduced in place and returned: a CUDA tensor by torch.distributed.all_reduce (it
    must be initialised: ddp_init_group; else jobkit.InvalidArgumentError), a CPU tensor or numpy
    array by jobkit. A number or a list of numbers gives a new value (ints stay exact). On a
    single rank, or inside a main-only or once-per-node section (ddp_prevent_block), it returns
    communication_object unchanged without looking at reduce_op, as SpeechBrain.
    """
    if ddp_prevent_block():
        return communication_object
    dist = torch_dist("ddp_all_reduce", None, communication_object)
    if dist is None:
        result = jobkit.all_reduce(communication_object, reduce_op, timeout=timeout)
        return communication_object if result is None else result
    if dist is not NOTHING:
        dist.all_reduce(communication_object, op=torch_op(reduce_op, "ddp_all_reduce"))
    return communication_object


def _backend(run_opts: Union[Mapping[str, Any], Sequence[str]]) -> str:
    """run_opts' distributed_backend (SpeechBrain's default: nccl), from its dict or its arguments."""
    if isinstance(run_opts, Mapping):
        return str(run_opts.get("distributed_backend", "nccl"))
    if isinstance(run_opts, str) or not isinstance(run_opts, Sequence):
        raise jobkit.InvalidArgumentError(f"ddp_init_group(run_opts={run_opts!r}): a dict of run options or a "
                                          "list of command-line arguments")
    for i, argument in enumerate(run_opts):
        if argument.startswith("--distributed_backend="):
            return argument.split("=", 1)[1]
        if argument == "--distributed_backend" and i + 1 < len(run_opts):
            return run_opts[i + 1]
    return "nccl"


def ddp_init_group(run_opts: Union[Mapping[str, Any], Sequence[str]]) -> None:
    """Initialises torch.distributed with run_opts' distributed_backend ("nccl", "gloo", "mpi"; nccl
    by default) and SpeechBrain's 7200 s timeout, through jobkit.torch.init_process_group: the rank
    and world size from the launcher, no MASTER_ADDR or RANK needed. Does nothing on one rank.

    run_opts: SpeechBrain's run options (a dict) or command-line arguments (``sys.argv[1:]``).
    Where SpeechBrain uses cuda:LOCAL_RANK, nccl takes the GPU by jobkit's device rule, and a rank
    without one raises jobkit.CudaError.
    """
    backend = _backend(run_opts)
    if backend not in ("nccl", "gloo", "mpi"):
        raise jobkit.InvalidArgumentError(f"ddp_init_group: distributed_backend={backend!r} is not one of "
                                          "nccl, gloo, mpi")
    if not jobkit.is_distributed():
        return
    from jobkit.torch import init_process_group

    init_process_group(backend, timeout=datetime.timedelta(seconds=7200))
