"""torch.distributed without MASTER_ADDR, MASTER_PORT or a TCPStore.

    import jobkit.torch
    jobkit.torch.init_process_group("gloo")   # under srun --mpi=pmix: no rendezvous variables

The rank and world size come from jobkit's identity (PMIx), and the c10d store is a
jobkit.torch.JobkitStore: rank 0 serves it on a port of its own, found and authenticated through
jobkit's data path (see jobkit/_store.py). It coexists with `jobkit exec`: the variables that
sets (RANK, MASTER_ADDR, ...) are not read.
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from . import _jobkit, identity
from ._store import JobkitStore

__all__ = ["init_process_group", "JobkitStore"]

_store = None  # torch keeps only the C++ side of a Python store: the Python object must stay alive


def init_process_group(backend="gloo", timeout=timedelta(minutes=30), **kwargs):
    """torch.distributed.init_process_group(backend, store=JobkitStore(), rank=, world_size=) with
    the identity from jobkit. Collective over every rank of the step.

    backend "nccl" (or "cpu:gloo,cuda:nccl"-style strings naming nccl) first selects GPU
    local_rank, as OLMo-core does, and raises jobkit.CudaError when this rank has no GPU. gloo
    uses the interface of this rank's first data-path address unless GLOO_SOCKET_IFNAME is set.
    Other keyword arguments go to torch.distributed.init_process_group. Returns the store.
    """
    global _store
    me = identity()
    if "nccl" in str(backend):
        if not dist.is_nccl_available():
            raise _jobkit.NcclError(f"init_process_group(backend={backend!r}): this torch has no NCCL "
                                    f"(rank {me.rank}, host {me.hostname})")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if me.local_rank >= count:
            raise _jobkit.CudaError(f"init_process_group(backend={backend!r}): rank {me.rank} (host {me.hostname}) "
                                    f"is local rank {me.local_rank} but the host has {count} CUDA device(s)")
        torch.cuda.set_device(me.local_rank)
    if not os.environ.get("GLOO_SOCKET_IFNAME"):
        addresses = _jobkit.data_path_addresses()
        if addresses and addresses[0][0]:
            os.environ["GLOO_SOCKET_IFNAME"] = addresses[0][0]
    store = JobkitStore(timeout)
    dist.init_process_group(backend, store=store, rank=me.rank, world_size=me.world_size, timeout=timeout,
                            **kwargs)
    _store = store
    return store
