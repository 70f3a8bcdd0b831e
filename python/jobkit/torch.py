"""torch.distributed without MASTER_ADDR, MASTER_PORT or a TCPStore.

    import jobkit.torch
    jobkit.torch.init_process_group("gloo")   # under srun --mpi=pmix: no rendezvous variables

The rank and world size come from jobkit's identity (PMIx), and the c10d store is a
jobkit.torch.JobkitStore: rank 0 serves it on a port of its own, found and authenticated through
jobkit's data path (see jobkit/_store.py). It coexists with `jobkit exec`: the variables that
sets (RANK, MASTER_ADDR, ...) are not read. After init, RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, NODE_RANK and GROUP_RANK hold jobkit's identity, for the frameworks' own getters.
"""

from __future__ import annotations

import math
import os
from datetime import timedelta
from typing import Any, Dict, Optional, Union

import torch
import torch.distributed as dist

from . import Identity, _jobkit, identity, select_device
from ._store import JobkitStore

__all__ = ["init_process_group", "device", "JobkitStore"]

_store: Optional[JobkitStore] = None  # torch keeps only the C++ side of a Python store: keep the object alive
_arguments: Optional[Dict[str, Any]] = None  # those of the call that initialised the process group


def device() -> torch.device:
    """This rank's device by jobkit's device rule (jobkit.select_device over
    torch.cuda.device_count()): ``cuda:0`` where Slurm bound one GPU to the task, ``cuda:<local
    rank>`` where the task sees every GPU of its node, ``cpu`` where it sees none."""
    return torch.device(select_device(int(torch.cuda.device_count())))


def _timedelta(timeout: Union[timedelta, float, None]) -> timedelta:
    if timeout is None:
        return timedelta(minutes=30)  # torch's default
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise _jobkit.InvalidArgumentError(f"init_process_group(timeout={timeout!r}): a timedelta or seconds")
    if not (math.isfinite(seconds) and seconds > 0):
        raise _jobkit.InvalidArgumentError(f"init_process_group(timeout={timeout!r}): more than 0 seconds")
    return timedelta(seconds=seconds)


def _identity_variables(me: Identity) -> Dict[str, str]:
    """The variables torchrun sets and the frameworks read (torch's env://, Lightning, composer)."""
    return {"RANK": str(me.rank), "LOCAL_RANK": str(me.local_rank), "WORLD_SIZE": str(me.world_size),
            "LOCAL_WORLD_SIZE": str(me.local_world_size), "NODE_RANK": str(me.node_rank),
            "GROUP_RANK": str(me.node_rank)}


def _check_variables(me: Identity, variables: Dict[str, str]) -> None:
    """Refuses, before anything starts, a variable already set to another value than jobkit's."""
    conflicts = [f"{name}={os.environ[name]!r} (jobkit: {value})" for name, value in variables.items()
                 if os.environ.get(name, value) != value]
    if conflicts:
        raise _jobkit.InvalidEnvironmentError(
            f"init_process_group: rank {me.rank} (host {me.hostname}) finds {', '.join(conflicts)} in its "
            f"environment, which disagrees with jobkit's identity (source {me.source}); unset it")


def _set_cuda_device(backend: str, me: Identity) -> None:
    if not dist.is_nccl_available():
        raise _jobkit.NcclError(f"init_process_group(backend={backend!r}): this torch has no NCCL "
                                f"(rank {me.rank}, host {me.hostname})")
    count = int(torch.cuda.device_count())
    if count == 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise _jobkit.CudaError(f"init_process_group(backend={backend!r}): rank {me.rank} (host {me.hostname}) "
                                f"sees no CUDA device (CUDA_VISIBLE_DEVICES="
                                f"{'unset' if visible is None else repr(visible)})")
    torch.cuda.set_device(_jobkit.select_device(count, me.local_rank, me.local_world_size))


def _text(value: object) -> str:
    return str(value) if isinstance(value, timedelta) else repr(value)


def _check_same(arguments: Dict[str, Any]) -> None:
    assert _arguments is not None
    differing = [f"{name}={_text(arguments.get(name))} (first call: {_text(_arguments.get(name))})"
                 for name in sorted(set(arguments) | set(_arguments)) if arguments.get(name) != _arguments.get(name)]
    if differing:
        raise _jobkit.InvalidArgumentError(f"init_process_group: the process group is initialised already, "
                                           f"with other arguments: {', '.join(differing)}")


def init_process_group(backend: str = "gloo", timeout: Union[timedelta, float, None] = None,
                       **kwargs: Any) -> JobkitStore:
    """torch.distributed.init_process_group(backend, store=JobkitStore(), rank=, world_size=) with
    the identity from jobkit. Collective over every rank of the step. Returns the store.

    backend "nccl" (or "cpu:gloo,cuda:nccl"-style strings naming nccl) first sets this rank's GPU
    by jobkit's device rule (see jobkit.select_device: cuda:0 where Slurm bound one GPU to each
    task, the local rank's where the task sees its node's GPUs), and raises jobkit.CudaError when
    this rank sees no GPU, jobkit.NcclError when torch has no NCCL. gloo uses the interface of this
    rank's first data-path address unless GLOO_SOCKET_IFNAME is set. timeout: a timedelta or
    seconds (None: 30 minutes, torch's default). Other keyword arguments go to
    torch.distributed.init_process_group.

    Once initialised, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK and GROUP_RANK hold
    jobkit's identity (a variable already set to another value is refused before anything starts).
    A second call with the same arguments returns the same store; with others it raises
    jobkit.InvalidArgumentError naming them. After torch.distributed.destroy_process_group() it
    initialises again.
    """
    global _store, _arguments
    arguments = {"backend": backend, "timeout": _timedelta(timeout), **kwargs}
    if dist.is_initialized():
        if _arguments is None or _store is None:
            raise _jobkit.InvalidArgumentError("init_process_group: torch.distributed was initialised without jobkit")
        _check_same(arguments)
        return _store
    me = identity()
    variables = _identity_variables(me)
    _check_variables(me, variables)
    if "nccl" in str(backend):
        _set_cuda_device(backend, me)
    if not os.environ.get("GLOO_SOCKET_IFNAME"):
        addresses = _jobkit.data_path_addresses()
        if addresses and addresses[0][0]:
            os.environ["GLOO_SOCKET_IFNAME"] = addresses[0][0]
    store = JobkitStore(arguments["timeout"])  # type: ignore[no-untyped-call]  # _store.py has no hints yet
    dist.init_process_group(backend, store=store, rank=me.rank, world_size=me.world_size,
                            timeout=arguments["timeout"], **kwargs)
    _store, _arguments = store, arguments
    os.environ.update(variables)
    return store
