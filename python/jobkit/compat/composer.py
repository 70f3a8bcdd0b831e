"""composer's ``composer.utils.dist`` on jobkit: the same names, signatures and defaults.

Porting is one import line::

    from jobkit.compat import composer as dist      # was: from composer.utils import dist

The getters read jobkit's identity (PMIx, then Slurm, ...) where composer reads RANK, LOCAL_RANK,
NODE_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE from the environment set by its own launcher; the values
are exact on uneven and cyclic layouts and need no ``composer`` launcher.

The collectives run on jobkit (every rank, or the members of a ``jobkit.Group`` passed as
``group=``; CPU tensors in place) and need no initialised process group; they end at jobkit's
deadline (JOBKIT_TIMEOUT) naming the ranks that did not arrive instead of hanging. Where the call
is torch.distributed's by nature -- ``group=`` is a torch ProcessGroup, or the tensor is on a GPU --
it goes to torch.distributed, which initialize_dist() initialises (jobkit.torch.init_process_group);
as in composer, such a call on a single rank without it does nothing. A GPU tensor with a
jobkit.Group, or a ``group=`` of neither kind, is jobkit.InvalidArgumentError (composer hands any
group to torch). The rule is jobkit.compat._route's, shared with olmo_core and speechbrain.
"""

from __future__ import annotations

import numbers
from typing import Any, List, Optional, Sequence, TypeVar

import jobkit

from . import _route
from ._route import NOTHING, torch_dist, torch_op

__all__ = [
    "all_gather", "all_gather_object", "all_reduce", "barrier", "broadcast", "broadcast_object_list",
    "get_global_rank", "get_local_rank", "get_local_world_size", "get_node_rank", "get_sampler",
    "get_world_size", "initialize_dist", "is_available", "is_initialized",
]

TObj = TypeVar("TObj")

_REDUCE_OPERATIONS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG")
_BACKENDS = {"cpu": "gloo", "gpu": "nccl", "cuda": "nccl", "mps": "gloo"}  # composer's device names


def _size(group: Optional[jobkit.Group]) -> int:
    """The number of members of group (None: the world)."""
    return jobkit.world_size() if group is None else group.size()


def get_world_size() -> int:
    """The number of ranks in the step (jobkit.world_size(); composer reads WORLD_SIZE)."""
    return jobkit.world_size()


def get_global_rank(group: Any = None) -> int:
    """This process's global rank (group=None), or its rank in ``group``: a jobkit.Group, or a torch
    ProcessGroup (torch.distributed.get_rank(group)). composer reads RANK; jobkit asks PMIx."""
    if group is None:
        return jobkit.rank()
    if isinstance(group, jobkit.Group):
        return group.rank()
    import torch.distributed as dist

    return int(dist.get_rank(group))


def get_local_world_size() -> int:
    """The number of ranks on this node, exact on uneven layouts (composer reads LOCAL_WORLD_SIZE)."""
    return jobkit.local_world_size()


def get_local_rank() -> int:
    """This process's rank among its node's ranks, on [0; LOCAL_WORLD_SIZE - 1]."""
    return jobkit.local_rank()


def get_node_rank() -> int:
    """The index of this process's node, exact on cyclic layouts too (composer reads NODE_RANK)."""
    return jobkit.node_rank()


def barrier(group: Any = None) -> None:
    """Returns when every rank (every member of ``group``) has arrived; torch's barrier where
    ``group`` is a torch ProcessGroup."""
    dist = torch_dist("barrier", group)
    if dist is None:
        jobkit.barrier(group=group)
    elif dist is not NOTHING:
        dist.barrier(group=group)


def all_reduce(tensor: Any, reduce_operation: str = "SUM", group: Any = None) -> None:
    """Reduces ``tensor`` in place over every rank; every rank gets the same result, bit for bit.

    reduce_operation: SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR (and AVG), in any case. A CPU tensor
    (or numpy array) goes through jobkit; a GPU tensor or a torch ProcessGroup through torch. A
    Python number cannot be reduced in place and is refused (use jobkit.all_reduce, which returns
    the result exactly, never squeezed through float32).
    """
    if not isinstance(reduce_operation, str) or reduce_operation.upper() not in _REDUCE_OPERATIONS:
        raise jobkit.InvalidArgumentError(f"all_reduce: reduce_operation={reduce_operation!r} is not one of "
                                          f"{', '.join(_REDUCE_OPERATIONS)}")
    if isinstance(tensor, (numbers.Number, list, tuple)):
        raise jobkit.InvalidArgumentError(f"all_reduce: tensor={tensor!r} is not a tensor reduced in place; "
                                          "jobkit.all_reduce(value, op) returns the reduced value")
    dist = torch_dist("all_reduce", group, tensor)
    if dist is None:
        jobkit.all_reduce(tensor, reduce_operation, group=group)
    elif dist is not NOTHING:
        dist.all_reduce(tensor, op=torch_op(reduce_operation), group=group)


def broadcast(tensor: Any, src: int, group: Any = None) -> None:
    """``src``'s tensor into every rank's tensor, in place (same dtype and shape everywhere); src
    is a global rank, also with ``group=``."""
    dist = torch_dist("broadcast", group, tensor)
    if dist is None:
        jobkit.broadcast(tensor, src, group=group)
    elif dist is not NOTHING:
        dist.broadcast(tensor, src=src, group=group)


def broadcast_object_list(object_list: List[Any], src: int = 0, group: Any = None) -> None:
    """Replaces the items of every rank's ``object_list`` with ``src``'s, in place (returns None).
    Every rank passes a list of the same length: a rank whose length differs from src's raises
    jobkit.InvalidArgumentError after the broadcast, so no rank is left waiting."""
    if not isinstance(object_list, list):
        raise jobkit.InvalidArgumentError(f"broadcast_object_list: object_list={object_list!r} is not a list")
    dist = torch_dist("broadcast_object_list", group)
    if dist is not None:
        if dist is not NOTHING:
            dist.broadcast_object_list(object_list, src=src, group=group)
        return
    received = jobkit.broadcast_object(list(object_list), src, group=group)
    if len(received) != len(object_list):
        raise jobkit.InvalidArgumentError(f"broadcast_object_list: object_list has {len(object_list)} items on rank "
                                          f"{jobkit.rank()} and {len(received)} on src={src}")
    object_list[:] = received


def all_gather(tensor: Any, group: Any = None) -> Sequence[Any]:
    """Every rank's tensor (a torch tensor of the same dtype and shape everywhere), in rank order:
    a list of new contiguous tensors, also for a transposed or sliced tensor (composer's
    torch.empty_like keeps its strides)."""
    dist = torch_dist("all_gather", group, tensor)
    if dist is NOTHING:
        return [tensor]
    import torch

    size = _size(group) if dist is None else dist.get_world_size(group)
    gathered = [torch.empty_like(tensor, memory_format=torch.contiguous_format) for _ in range(size)]
    if dist is None:
        jobkit.all_gather(gathered, tensor.detach().contiguous(), group=group)
    else:
        dist.all_gather(gathered, tensor, group=group)
    return gathered


def all_gather_object(obj: TObj, group: Any = None) -> List[TObj]:
    """Every rank's picklable ``obj``, in rank order, on every rank."""
    return _route.all_gather_object(obj, group)


def is_available() -> bool:
    """Whether torch is installed with distributed support (torch.distributed.is_available()).
    jobkit's own collectives here work either way."""
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return bool(dist.is_available())


def is_initialized() -> bool:
    """Whether torch.distributed's default process group is initialised (False without torch).
    jobkit's own collectives here do not need it."""
    if not is_available():
        return False
    import torch.distributed as dist

    return bool(dist.is_initialized())


def _backend(device: Any) -> str:
    """The torch.distributed backend of composer's device: a name or a composer Device."""
    if device is None:
        import torch

        return "nccl" if torch.cuda.is_available() else "gloo"
    if not isinstance(device, str):
        backend = getattr(device, "dist_backend", None)
        if isinstance(backend, str) and backend.lower() in ("gloo", "nccl"):
            return backend.lower()
    elif device.lower() in _BACKENDS:
        return _BACKENDS[device.lower()]
    raise jobkit.InvalidArgumentError(f"initialize_dist: device={device!r} is not one of 'cpu', 'gpu', 'mps' or a "
                                      "composer Device with the gloo or nccl backend (tpu/xla is not supported)")


def initialize_dist(device: Any = None, timeout: float = 300.0) -> None:
    """Initialises torch.distributed's default process group with jobkit.torch.init_process_group:
    rank and world size from jobkit's identity, no MASTER_ADDR, MASTER_PORT or composer launcher.

    device: 'cpu' or 'mps' (gloo), 'gpu' (nccl, this rank's GPU chosen by jobkit.select_device), a
    composer Device, or None (gpu where CUDA is available, else cpu); timeout: seconds (5 minutes,
    as composer). Already initialised with the same backend: returns; with another:
    jobkit.InvalidArgumentError. Afterwards RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and
    NODE_RANK hold jobkit's identity. On one rank composer uses a HashStore; here the same
    jobkit store serves one rank or many.
    """
    backend = _backend(device)
    import torch.distributed as dist

    from jobkit.torch import init_process_group

    if dist.is_initialized():
        current = str(dist.get_backend()).lower()
        if current != backend:
            raise jobkit.InvalidArgumentError(f"initialize_dist: device={device!r} needs backend {backend}, but the "
                                              f"process group is initialised with {current}")
        return
    init_process_group(backend, timeout=timeout)  # checks timeout: positive seconds


def get_sampler(dataset: Any, *, drop_last: bool = False, shuffle: bool = False, num_replicas: Optional[int] = None,
                rank: Optional[int] = None) -> Any:
    """A torch.utils.data.DistributedSampler over ``dataset``: num_replicas defaults to the world
    size and rank to the global rank, both from jobkit's identity."""
    import torch.utils.data

    replicas = jobkit.world_size() if num_replicas is None else num_replicas
    me = jobkit.rank() if rank is None else rank
    if replicas < 1:
        raise jobkit.InvalidArgumentError(f"get_sampler: num_replicas={num_replicas!r} must be at least 1")
    if not 0 <= me < replicas:
        raise jobkit.InvalidArgumentError(f"get_sampler: rank={me!r} is not on [0; {replicas - 1}]")
    return torch.utils.data.DistributedSampler(dataset, num_replicas=replicas, rank=me, shuffle=shuffle,
                                               drop_last=drop_last)
