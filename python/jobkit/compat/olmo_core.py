"""OLMo-core's ``olmo_core.distributed.utils`` on jobkit, under its names and signatures.

Port by changing the import line::

    from olmo_core.distributed import utils as dist_utils   # before
    from jobkit.compat import olmo_core as dist_utils       # after

As in OLMo-core every function also works in a single process. The differences:

- Identity (rank, local rank, world size, nodes) is jobkit's, discovered from PMIx when the step
  starts: the getters give the real values before torch.distributed is initialised (OLMo-core
  returns 0 or 1 until then) and never read RANK, LOCAL_RANK, LOCAL_WORLD_SIZE or NUM_NODES.
- ``group=`` takes None (every rank), a ``jobkit.Group`` (jobkit's collectives) or a torch
  ProcessGroup (torch.distributed's, once ``init_distributed`` has initialised it). CUDA tensors
  go through torch.distributed too (with a jobkit.Group: jobkit.InvalidArgumentError); CPU
  tensors and Python values through jobkit's collectives, whose deadline (JOBKIT_TIMEOUT) ends a
  wait on a dead rank with an error naming it. On one rank before init_distributed, torch's
  route does nothing, as OLMo-core. The rule is jobkit.compat._route's.
- Python values travel exactly (ints as int64, floats as float64, anything picklable), where
  OLMo-core sends them as a one-element tensor (a float becomes float32).
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from datetime import timedelta
from typing import Any, Callable, List, Optional, TypeVar, cast

import jobkit
from jobkit import InvalidArgumentError, InvalidEnvironmentError
from jobkit._collectives import _op

from . import _route
from ._route import NOTHING, initialised_torch, torch_dist, torch_op

__all__ = [
    "init_distributed", "validate_env_vars", "is_distributed", "barrier", "get_rank", "get_global_rank",
    "get_local_rank", "get_fs_local_rank", "get_world_size", "get_local_world_size", "get_num_nodes",
    "synchronize_value", "synchronize_flag", "all_reduce_value", "broadcast_object", "scatter_object",
    "all_gather", "all_gather_object", "get_mesh_coordinates", "backend_supports_cuda",
    "backend_supports_cpu", "do_n_at_a_time",
]

T = TypeVar("T")
V = TypeVar("V")  # OLMo-core's: bool, int, float or torch.Tensor

log = logging.getLogger(__name__)

_probed_fs_local_rank: Optional[int] = None  # init_distributed's probe of the working directory


def _is_tensor(value: object) -> bool:
    """True for a torch.Tensor (without importing torch)."""
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "device")


def _tensor_route(function: str, group: Any, tensor: Any = None) -> Any:
    """jobkit.compat._route's torch_dist, with NOTHING also where the group is jobkit's and has
    one member: nothing to exchange."""
    dist = torch_dist(function, group, tensor)
    return NOTHING if dist is None and get_world_size(group) == 1 else dist


def init_distributed(backend: str = "nccl", timeout: timedelta = timedelta(seconds=1800),
                     shared_filesytem: bool = True, **kwargs: Any) -> None:
    """Initialise torch.distributed with jobkit.torch.init_process_group (rank and world size from
    PMIx, no MASTER_ADDR or MASTER_PORT) and, for NCCL, set this rank's GPU by jobkit's device rule
    (jobkit.select_device, which honours Slurm's one GPU per task) instead of ``cuda:$LOCAL_RANK``.

    As OLMo-core: TORCH_NCCL_AVOID_RECORD_STREAMS=1, TORCH_DIST_INIT_BARRIER=1 and, with
    shared_filesytem (the seed's spelling), OLMO_SHARED_FS=1 are set unless already set; a process
    group initialised already is kept (its backend must be `backend`; the GPU is still set).
    Where no rank has OLMO_SHARED_FS=1 or FS_LOCAL_RANK, jobkit probes whether the working
    directory is shared (jobkit.fs_local_rank, collective) for get_fs_local_rank, where OLMo-core
    assumes one per node; the ranks gather their variables first, so that all probe or none does
    (where only some have them, none probes and the others keep OLMo-core's local rank).
    Collective over every rank. Beaker's NCCL presets are not applied.
    """
    global _probed_fs_local_rank
    import torch
    import torch.distributed as dist

    import jobkit.torch

    for name in ("TORCH_NCCL_AVOID_RECORD_STREAMS", "TORCH_DIST_INIT_BARRIER"):
        os.environ.setdefault(name, "1")
    if shared_filesytem:
        os.environ.setdefault("OLMO_SHARED_FS", "1")
    if dist.is_initialized():
        if str(dist.get_backend()) != backend:
            raise InvalidArgumentError(f"init_distributed(backend={backend!r}): torch.distributed is initialised "
                                       f"already with backend {str(dist.get_backend())!r}")
        if backend_supports_cuda(backend):
            torch.cuda.set_device(jobkit.torch.device())
    else:
        jobkit.torch.init_process_group(backend, timeout=timeout, **kwargs)
    validate_env_vars()
    if _every_rank_probes():
        _probed_fs_local_rank = jobkit.fs_local_rank(".")
    log.info("Global rank %d = local rank %d = file system local rank %d", get_rank(), get_local_rank(),
             get_fs_local_rank())


def _every_rank_probes() -> bool:
    """True on every rank where no rank has OLMO_SHARED_FS=1 or FS_LOCAL_RANK (the probe is
    collective, and jobkit.fs_local_rank returns early on a rank that has one), else False on
    every rank. Collective."""
    mine = os.environ.get("OLMO_SHARED_FS") != "1" and not os.environ.get("FS_LOCAL_RANK")
    return all(jobkit.all_gather_object(mine))


def validate_env_vars() -> None:
    """Check that RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK and NUM_NODES, where
    set, agree with jobkit's identity; jobkit.InvalidEnvironmentError names those that do not.

    OLMo-core requires LOCAL_RANK and NUM_NODES or LOCAL_WORLD_SIZE because its getters read them;
    here nothing reads them, so a missing one is fine and a wrong one (left over from another
    launcher, or guessed from SLURM_*) is the error, in every process.
    """
    me = jobkit.identity()
    expected = {"RANK": me.rank, "LOCAL_RANK": me.local_rank, "WORLD_SIZE": me.world_size,
                "LOCAL_WORLD_SIZE": me.local_world_size, "NODE_RANK": me.node_rank, "NUM_NODES": me.num_nodes}
    wrong = [f"{name}={os.environ[name]!r} (jobkit: {value})" for name, value in expected.items()
             if os.environ.get(name, str(value)) != str(value)]
    if wrong:
        raise InvalidEnvironmentError(f"validate_env_vars: rank {me.rank} (host {me.hostname}) finds "
                                      f"{', '.join(wrong)}, not jobkit's identity (source {me.source})")


def is_distributed() -> bool:
    """True when the step has more than one rank (jobkit's identity) or torch.distributed is
    initialised (OLMo-core's only test)."""
    return jobkit.is_distributed() or initialised_torch() is not None


def barrier(group: Any = None) -> None:
    """Wait for every rank of the group: jobkit's barrier (with its deadline), or
    torch.distributed's for a torch ProcessGroup."""
    dist = torch_dist("barrier", group)
    if dist is None:
        jobkit.barrier(group=group)
    elif dist is not NOTHING:
        dist.barrier(group)


def get_rank(group: Any = None) -> int:
    """This rank within the group (None: the global rank, from jobkit's identity)."""
    dist = torch_dist("get_rank", group)
    if dist is None:
        return jobkit.rank() if group is None else int(group.rank())
    return 0 if dist is NOTHING else int(dist.get_rank(group))


def get_global_rank(group_rank: int, group: Any = None) -> int:
    """The global rank of rank `group_rank` of the group; jobkit.InvalidArgumentError when the
    group has no such rank."""
    dist = torch_dist("get_global_rank", group)
    if dist is not None and dist is not NOTHING:
        return int(dist.get_global_rank(group, group_rank))
    members: List[int] = list(range(jobkit.world_size())) if group is None or dist is NOTHING else group.world_ranks
    if not isinstance(group_rank, int) or not 0 <= group_rank < len(members):
        raise InvalidArgumentError(f"get_global_rank: group_rank={group_rank!r} is not a rank of a group of "
                                   f"{len(members)}")
    return members[group_rank]


def get_local_rank() -> int:
    """This rank among the ranks of its node, from jobkit's identity (not LOCAL_RANK)."""
    return jobkit.local_rank()


def get_fs_local_rank(group: Any = None) -> int:
    """This rank among the ranks that share its file system, without communicating: FS_LOCAL_RANK
    if set, else get_rank(group) with OLMO_SHARED_FS=1 (as OLMo-core), else the rank's place among
    the ranks that see the same working directory as init_distributed probed it, and before
    init_distributed the local rank (OLMo-core's assumption). jobkit.fs_local_rank(dir) probes any
    directory (collective)."""
    value = os.environ.get("FS_LOCAL_RANK")
    if value:
        if not value.isdigit():
            raise InvalidEnvironmentError(f"get_fs_local_rank: FS_LOCAL_RANK={value!r} is not a non-negative integer")
        return int(value)
    if os.environ.get("OLMO_SHARED_FS") == "1":
        return get_rank(group)
    return get_local_rank() if _probed_fs_local_rank is None else _probed_fs_local_rank


def get_world_size(group: Any = None) -> int:
    """The number of ranks in the group (None: in the step, from jobkit's identity; 1 alone)."""
    dist = torch_dist("get_world_size", group)
    if dist is None:
        return jobkit.world_size() if group is None else int(group.size())
    return 1 if dist is NOTHING else int(dist.get_world_size(group))


def get_local_world_size() -> int:
    """The number of ranks on this rank's node, from jobkit's identity (not LOCAL_WORLD_SIZE);
    nodes may hold different numbers of ranks."""
    return jobkit.local_world_size()


def get_num_nodes() -> int:
    """The number of nodes of the step, from jobkit's identity, where OLMo-core takes NUM_NODES or
    world size // local world size (wrong when nodes hold different numbers of ranks)."""
    return jobkit.num_nodes()


def synchronize_value(value: V, device: Any, src: int = 0, group: Any = None) -> V:
    """src's value on every rank of the group. A tensor is moved to `device` and broadcast in place
    (CPU: jobkit.broadcast; GPU or a torch group: torch.distributed) and returned; a bool, int,
    float or any picklable value travels exactly, as broadcast_object (OLMo-core sends it as a
    tensor on `device`: floats become float32). A tensor alone in its group comes back as is.
    """
    if not _is_tensor(value):
        return broadcast_object(value, src, group)
    tensor = cast(Any, value).to(device)
    dist = _tensor_route("synchronize_value", group, tensor)
    if dist is NOTHING:
        return value
    if dist is None:
        jobkit.broadcast(tensor.detach(), src, group=group)
    else:
        dist.broadcast(tensor, src, group=group)
    return cast(V, tensor)


def synchronize_flag(flag: bool, device: Any, group: Any = None) -> bool:
    """Rank 0's flag on every rank of the group (synchronize_value with src=0)."""
    return bool(synchronize_value(flag, device, group=group))


def all_reduce_value(value: V, device: Any, op: Any = "sum", group: Any = None) -> V:
    """value reduced over the group with op (torch.distributed.ReduceOp or its name: sum, prod,
    min, max, avg, band, bor, bxor; the default is OLMo-core's ReduceOp.SUM). A tensor is moved to
    `device`, reduced in place (CPU: jobkit.all_reduce; GPU or a torch group: torch.distributed)
    and returned; a tensor alone in its group comes back as is. A number gives the same result on
    both routes (with a torch group it travels as a one-element tensor on `device`): bools and
    ints as int64, returned as bool and int; floats as float64; avg as a float. OLMo-core squeezes
    floats through float32 and returns an int's avg truncated."""
    if not _is_tensor(value):
        return cast(V, _reduce_number(value, device, op, group))
    tensor = cast(Any, value).to(device)
    dist = _tensor_route("all_reduce_value", group, tensor)
    if dist is NOTHING:
        return value
    if dist is None:
        jobkit.all_reduce(tensor.detach(), op, group=group)
    else:
        dist.all_reduce(tensor, op=torch_op(op, "all_reduce_value"), group=group)
    return cast(V, tensor)


def _reduce_number(value: Any, device: Any, op: Any, group: Any) -> Any:
    """A number reduced over the group, the same on both routes: bools and ints as int64 (a bool
    comes back a bool, an int an int), floats as float64, avg as a float (the float64 sum over the
    group size). jobkit.all_reduce computes it; with a torch ProcessGroup, torch.distributed does,
    on a one-element tensor on `device`."""
    dist = torch_dist("all_reduce_value", group)
    if dist is None or dist is NOTHING:
        result = jobkit.all_reduce(value, op, group=None if dist is NOTHING else group)
        return bool(result) if isinstance(value, bool) else result
    import torch

    name = _op(op, "all_reduce_value")
    exact = isinstance(value, numbers.Integral) and name != "avg"
    tensor = torch.tensor(value, dtype=torch.int64 if exact else torch.float64, device=device)
    dist.all_reduce(tensor, op=torch_op("sum" if name == "avg" else name), group=group)
    if name == "avg":
        return tensor.item() / dist.get_world_size(group)
    return bool(tensor.item()) if isinstance(value, bool) else tensor.item()


def broadcast_object(obj: T, src: int = 0, group: Any = None) -> T:
    """src's obj (pickled) on every rank of the group; src gets obj itself back."""
    dist = torch_dist("broadcast_object", group)
    if dist is None:
        return cast(T, jobkit.broadcast_object(obj, src, group=group))
    if dist is not NOTHING:
        holder = [obj]
        dist.broadcast_object_list(holder, src, group=group)
        obj = holder[0]
    return obj


def scatter_object(obj: T, src: int = 0, group: Any = None) -> T:
    """src's obj on every rank of the group: OLMo-core's scatter_object, which sends one object to
    all (broadcast_object). jobkit.scatter_object is another function: one object per rank."""
    return broadcast_object(obj, src, group)


def all_gather(tensor: Any, group: Any = None) -> List[Any]:
    """Every rank's tensor, in rank order, as a list of new tensors on tensor's device; shapes may
    differ per rank (exchanged first), dtypes not. CPU tensors go through jobkit.all_gather, GPU
    tensors or a torch group through torch.distributed."""
    dist = _tensor_route("all_gather", group, tensor)
    if dist is NOTHING:
        return [tensor]
    import torch

    shapes = all_gather_object(tuple(tensor.shape), group)
    outputs = [torch.empty(shape, dtype=tensor.dtype, device=tensor.device) for shape in shapes]
    if dist is None:
        jobkit.all_gather(outputs, tensor.detach().contiguous(), group=group)
    else:
        dist.all_gather(outputs, tensor, group=group)
    return outputs


def all_gather_object(obj: T, group: Any = None) -> List[T]:
    """Every rank's obj (pickled), in rank order, on every rank of the group."""
    return _route.all_gather_object(obj, group)


def get_mesh_coordinates(mesh: Any, rank: Optional[int] = None) -> Optional[List[int]]:
    """The coordinates of global rank `rank` (None: this rank) in a device mesh, or None when the
    mesh does not hold it. mesh: a torch DeviceMesh, or its grid of ranks (a tensor, numpy array or
    nested lists); a rank found twice is jobkit.InvalidArgumentError."""
    rank = get_rank() if rank is None else rank
    grid = getattr(mesh, "mesh", mesh)
    grid = grid.tolist() if hasattr(grid, "tolist") else grid
    found: List[List[int]] = []

    def search(cells: Any, where: List[int]) -> None:
        if isinstance(cells, (list, tuple)):
            for i, cell in enumerate(cells):
                search(cell, where + [i])
        elif cells == rank:
            found.append(where)

    search(grid, [])
    if len(found) > 1:
        raise InvalidArgumentError(f"get_mesh_coordinates: rank {rank} is in the mesh {len(found)} times: {grid!r}")
    return found[0] if found else None


def _backend(backend: Optional[str], function: str) -> Optional[str]:
    """backend, else the backend of the initialised torch.distributed, else None."""
    if backend is not None and not isinstance(backend, str):
        raise InvalidArgumentError(f"{function}: backend={backend!r}: a string such as 'nccl', or None")
    dist = initialised_torch()
    return backend if backend is not None or dist is None else str(dist.get_backend())


def backend_supports_cuda(backend: Optional[str] = None) -> bool:
    """True when the backend (None: torch.distributed's, or whether CUDA is available before it is
    initialised) takes CUDA tensors: names with nccl."""
    name = _backend(backend, "backend_supports_cuda")
    if name is None:
        import torch

        return bool(torch.cuda.is_available())
    return "nccl" in name


def backend_supports_cpu(backend: Optional[str] = None) -> bool:
    """True when the backend (None: torch.distributed's, or True before it is initialised) takes
    CPU tensors: names with gloo or mpi. jobkit's own collectives always do."""
    name = _backend(backend, "backend_supports_cpu")
    return name is None or "gloo" in name or "mpi" in name


def do_n_at_a_time(f: Callable[[], T], *, n: Optional[int] = None, process_group: Any = None,
                   world_size: Optional[int] = None, local_rank: Optional[int] = None) -> T:
    """f() on every rank of the group, at most n at a time; each rank returns its own result.

    Without process_group, world_size and local_rank this is jobkit.do_n_at_a_time: n=None runs one
    rank per node at a time on any layout, where OLMo-core's n = number of nodes is one per node
    only when ranks are placed in blocks (not with srun --distribution=cyclic or uneven nodes).
    With any of them it is OLMo-core's rounds: ceil(world_size / n) rounds (world_size: the group's
    size, n: the number of nodes), local_rank (the group rank) runs in round local_rank % rounds,
    and every round ends with a barrier of the group.
    """
    if n is not None and (not isinstance(n, int) or n < 1):
        raise InvalidArgumentError(f"do_n_at_a_time: n={n!r} must be an integer of at least 1")
    if process_group is None and world_size is None and local_rank is None:
        return jobkit.do_n_at_a_time(f, n=n)
    size = get_world_size(process_group) if world_size is None else world_size
    mine = get_rank(process_group) if local_rank is None else local_rank
    rounds = math.ceil(size / (get_num_nodes() if n is None else n))
    result: List[T] = []
    for active in range(rounds):
        if mine % rounds == active:
            result.append(f())
        barrier(process_group)
    return result[0]
