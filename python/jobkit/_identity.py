"""Who this process is (``import jobkit``'s identity): the Identity dataclass, its getters and the
device rule. The Identity is discovered once, on the first call, by the C++ library."""

from dataclasses import dataclass as _dataclass
from typing import Optional as _Optional

from . import _jobkit
from ._jobkit import InvalidArgumentError


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
    component: int  # Slurm's het group number (srun --het-group=N); 0 outside a heterogeneous job
    num_components: int  # SLURM_HET_SIZE: the job's components; 1 outside a heterogeneous job
    component_rank: int  # index among the step's ranks of this component
    component_size: int  # the step's ranks in this component
    component_nodes: str  # the step's nodes of this component (a Slurm host list); "" outside one
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


_cached: _Optional[Identity] = None  # identity()'s, discovered on its first call


def identity() -> Identity:
    """This process's Identity, discovered once: PMIx, then PMI-2, then Slurm, then torchrun
    variables, then single-rank defaults (docs/environment.md)."""
    global _cached
    if _cached is None:
        _cached = Identity(*_jobkit.identity())
    return _cached


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

