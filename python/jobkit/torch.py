"""torch.distributed without MASTER_ADDR or MASTER_PORT.

    import jobkit.torch
    jobkit.torch.init_process_group("gloo")   # under srun --mpi=pmix: no rendezvous variables

The rank and world size come from jobkit's identity (PMIx). The c10d store is torch's own TCPStore,
served by rank 0 on a port the kernel picks (no collision), its address and port sent to every rank
over jobkit's authenticated data path (no MASTER_ADDR/MASTER_PORT): torch's semantics exactly, and
torch's scale (a C++ server, no GIL). With store="jobkit" it is a JobkitStore instead (see
jobkit/_store.py), whose every connection is authenticated, for a few hundred ranks. It coexists
with `jobkit exec`: the variables that sets (RANK, MASTER_ADDR, ...) are not read. After init,
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK and GROUP_RANK hold jobkit's identity,
for the frameworks' own getters. Where torch has a flight recorder a library can read, jobkit
watches torch's own collectives through it (jobkit/_torch_where.py): rank 0 logs where every rank is
once one has waited past JOBKIT_WHERE_REPORT_AFTER, and every rank's hang event names the torch
collective it waits in (docs/progress.md).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import Any, Dict, List, Optional, Union

import torch
import torch.distributed as dist

from . import Identity, _jobkit, _torch_where, broadcast_object, identity, select_device
from ._store import JobkitStore
from ._timeout import Timeout, seconds

__all__ = ["init_process_group", "device", "JobkitStore"]

_store: Optional[dist.Store] = None  # torch keeps only the C++ side of a Python store: keep the object alive
_arguments: Optional[Dict[str, Any]] = None  # those of the call that initialised the process group


def device() -> torch.device:
    """This rank's device by jobkit's device rule (jobkit.select_device over
    torch.cuda.device_count()): ``cuda:0`` where Slurm bound one GPU to the task, ``cuda:<local
    rank>`` where the task sees every GPU of its node, ``cpu`` where it sees none."""
    return torch.device(select_device(int(torch.cuda.device_count())))


def _timedelta(timeout: Timeout) -> timedelta:
    """init_process_group's timeout by jobkit's rule (jobkit/_timeout.py), as a timedelta; None is
    30 minutes, torch's default."""
    span = seconds(timeout, caller="init_process_group")
    return timedelta(minutes=30) if span is None else timedelta(seconds=span)


def _identity_variables(me: Identity) -> Dict[str, str]:
    """The variables torchrun sets and the frameworks read (torch's env://, Lightning, composer)."""
    return {"RANK": str(me.rank), "LOCAL_RANK": str(me.local_rank), "WORLD_SIZE": str(me.world_size),
            "LOCAL_WORLD_SIZE": str(me.local_world_size), "NODE_RANK": str(me.node_rank),
            "GROUP_RANK": str(me.node_rank),
            # What jobkit set, so that jobkit in a child process (a DataLoader worker, a script it
            # starts) takes these on any layout, where torchrun's own rule does not hold.
            "JOBKIT_TORCH_VARIABLES": f"{me.rank},{me.local_rank},{me.world_size},{me.local_world_size},"
                                      f"{me.node_rank},{me.num_nodes}"}


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


_CONNECT_LIMIT = timedelta(seconds=60)  # a TCPStore client's connection to rank 0's port, tries included


def _reachable(addresses: List[str], port: int) -> str:
    """The first of rank 0's data-path addresses that accepts a connection on `port`."""
    if len(addresses) == 1:
        return addresses[0]
    failures = []
    for address in addresses:
        try:
            socket.create_connection((address, port), timeout=10).close()
            return address
        except OSError as e:
            failures.append(f"{address}: {e}")
    raise _jobkit.PeerFailureError(f"init_process_group: rank {identity().rank} cannot reach rank 0's TCPStore on "
                                   f"port {port}: {'; '.join(failures)}")


def _tcp_store_object(host: str, port: int, world_size: int, is_master: bool, timeout: timedelta) -> dist.Store:
    """dist.TCPStore; where torch asks for its libuv backend but was built without it (Debian's torch
    2.6), its older backend."""
    try:
        return dist.TCPStore(host, port, world_size, is_master, timeout, wait_for_workers=False)
    except RuntimeError as e:
        if "libuv" not in str(e):
            raise
        return dist.TCPStore(host, port, world_size, is_master, timeout, wait_for_workers=False, use_libuv=False)


def _tcp_store(me: Identity, timeout: timedelta) -> dist.Store:
    """torch's TCPStore on a port rank 0's kernel picks, announced over jobkit's data path.
    Collective over every rank."""
    addresses = [address for _, address in _jobkit.data_path_addresses()] or ["127.0.0.1"]
    if me.rank == 0:
        store = _tcp_store_object(addresses[0], 0, me.world_size, True, timeout)
        broadcast_object((addresses, int(store.port)), 0)
        return store
    addresses, port = broadcast_object(None, 0)
    # A client tries to connect until its timeout: bounded here, then torch's timeout for the rest.
    store = _tcp_store_object(_reachable(addresses, port), port, me.world_size, False, min(timeout, _CONNECT_LIMIT))
    store.set_timeout(timeout)
    return store


def _make_store(store: Union[None, str, dist.Store], me: Identity, timeout: timedelta) -> dist.Store:
    if store is None:
        return _tcp_store(me, timeout)
    if isinstance(store, str) and store == "jobkit":
        return JobkitStore(timeout)  # type: ignore[no-untyped-call]  # _store.py has no hints yet
    if isinstance(store, dist.Store):
        return store
    raise _jobkit.InvalidArgumentError(f"init_process_group(store={store!r}): None (torch's TCPStore found "
                                       f"through jobkit), \"jobkit\" (a JobkitStore) or a torch.distributed.Store")


def _text(value: object) -> str:
    return str(value) if isinstance(value, timedelta) else repr(value)


def _check_same(arguments: Dict[str, Any]) -> None:
    assert _arguments is not None
    differing = [f"{name}={_text(arguments.get(name))} (first call: {_text(_arguments.get(name))})"
                 for name in sorted(set(arguments) | set(_arguments)) if arguments.get(name) != _arguments.get(name)]
    if differing:
        raise _jobkit.InvalidArgumentError(f"init_process_group: the process group is initialised already, "
                                           f"with other arguments: {', '.join(differing)}")


def init_process_group(backend: str = "gloo", timeout: Timeout = None,
                       store: Union[None, str, dist.Store] = None, **kwargs: Any) -> dist.Store:
    """torch.distributed.init_process_group(backend, store=, rank=, world_size=) with the identity
    from jobkit. Collective over every rank of the step. Returns the store.

    store: None (default): torch's TCPStore, served by rank 0 on a port its kernel picks, its
    address and port sent to every rank over jobkit's authenticated data path. "jobkit": a
    JobkitStore, whose connections are authenticated with a token sent the same way (for a few
    hundred ranks: rank 0 serves it from Python). A torch.distributed.Store: used as it is.

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
    span = _timedelta(timeout)
    arguments = {"backend": backend, "timeout": span, "store": store, **kwargs}
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
    made = _make_store(store, me, span)
    dist.init_process_group(backend, store=made, rank=me.rank, world_size=me.world_size, timeout=span, **kwargs)
    _store, _arguments = made, arguments
    os.environ.update(variables)
    _torch_where.watch(str(backend), me.rank)
    return made
