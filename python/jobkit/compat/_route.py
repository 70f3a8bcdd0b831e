"""Which library runs a jobkit.compat collective: jobkit's or torch.distributed's (one rule for the
composer, olmo_core and speechbrain modules).

- ``group=`` None or a ``jobkit.Group`` with no tensor, or a tensor in CPU memory (or a numpy
  array, a number): jobkit's collectives.
- ``group=`` a torch ProcessGroup, or a tensor outside CPU memory (CUDA): torch.distributed, once
  its default process group is initialised.
- A tensor outside CPU memory with a ``jobkit.Group``, or a ``group=`` of neither kind:
  jobkit.InvalidArgumentError naming both.
- torch's route on one rank without torch.distributed initialised: nothing to exchange, the call
  does nothing (as the seeds do without a process group); on more than one rank:
  jobkit.InvalidArgumentError.

Importing this module does not import torch.
"""

from __future__ import annotations

import sys
from typing import Any, List, TypeVar

import jobkit
from jobkit._collectives import _op

NOTHING = object()  # torch_dist's answer where the call has nothing to do (one rank, no torch.distributed)


def initialised_torch() -> Any:
    """torch.distributed where torch is imported and its default process group initialised, else
    None (without importing torch)."""
    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def torch_group(group: Any, function: str) -> bool:
    """True for a torch ProcessGroup, False for None (every rank) or a jobkit.Group; anything else
    is jobkit.InvalidArgumentError."""
    if group is None or isinstance(group, jobkit.Group):
        return False
    if type(group).__module__.split(".")[0] == "torch":
        return True
    raise jobkit.InvalidArgumentError(f"{function}: group={group!r} is not None (every rank), a jobkit.Group or a "
                                      "torch ProcessGroup")


def _device(tensor: Any) -> str:
    """The type of tensor's device: "cpu" for anything without a torch device (numpy, numbers)."""
    return str(getattr(getattr(tensor, "device", None), "type", "cpu"))


def torch_dist(function: str, group: Any = None, tensor: Any = None) -> Any:
    """torch.distributed where the call is torch's, None where it is jobkit's, NOTHING where it
    is torch's but nothing is to be done (one rank, torch.distributed not initialised)."""
    on_device = tensor is not None and _device(tensor) != "cpu"
    if not torch_group(group, function) and not on_device:
        return None
    if isinstance(group, jobkit.Group):
        raise jobkit.InvalidArgumentError(f"{function}: group={group!r} with a tensor on {tensor.device}: tensors "
                                          "outside CPU memory go through torch.distributed, whose groups are torch's "
                                          "ProcessGroups (or None), not jobkit.Group")
    dist = initialised_torch()
    if dist is not None:
        return dist
    if jobkit.world_size() == 1:
        return NOTHING
    where = f"a tensor on {tensor.device}" if on_device else f"group={group!r}"
    raise jobkit.InvalidArgumentError(f"{function}: {where} needs torch.distributed, which is not initialised: "
                                      "initialise it first (jobkit.torch.init_process_group)")


def torch_op(op: Any, function: str = "all_reduce") -> Any:
    """op as a torch.distributed.ReduceOp: a ReduceOp as is, a name (sum, prod/product, min, max,
    avg/average, band, bor, bxor; any case) as its ReduceOp; anything else is
    jobkit.InvalidArgumentError, as on jobkit's route."""
    name = _op(op, function)  # checks op as jobkit's collectives do
    if not isinstance(op, str):
        return op
    import torch.distributed as dist

    return getattr(dist.ReduceOp, "PRODUCT" if name == "prod" else name.upper())


T = TypeVar("T")


def all_gather_object(obj: T, group: Any = None) -> List[T]:
    """Every rank's picklable obj, in rank order, on every rank of the group: jobkit's, or
    torch.distributed's for a torch group (composer's and OLMo-core's all_gather_object)."""
    dist = torch_dist("all_gather_object", group)
    if dist is None:
        return jobkit.all_gather_object(obj, group=group)
    if dist is NOTHING:
        return [obj]
    gathered: List[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, obj, group=group)
    return gathered
