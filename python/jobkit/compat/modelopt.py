"""ModelOpt's ``modelopt.torch.export.distribute`` on jobkit: the same names, signatures and defaults.

Porting is one import line::

    from jobkit.compat import modelopt as distribute   # was: from modelopt.torch.export import distribute

The ranks come from jobkit's identity (PMIx), not from torch.distributed. get_tensors_parallel and
get_configs_parallel gather through jobkit.node_local_gather: POSIX shared memory whose names are
scoped to the job and step (ModelOpt's ``rank_<r>`` collide between two jobs on a node and with a
crashed run's leftovers), jobkit's collectives or a workspace when the ranks span several nodes
(ModelOpt's shared memory works on one node only), deadlines (JOBKIT_TIMEOUT) instead of hangs, and
an error on every member when one fails. Objects travel as pickles.
"""

from __future__ import annotations

import os
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import jobkit

__all__ = ["NFSWorkspace", "get_configs_parallel", "get_tensors_parallel"]


class NFSWorkspace:
    """A directory on a shared file system (NFS) where each rank leaves its config and weights
    for the others: ``<workspace_path>/rank_<rank>_state.pth``, written with torch.save.

    As in ModelOpt, nothing here is collective nor synchronised: the caller makes the readers wait
    for the writers (e.g. jobkit.barrier()). Unlike ModelOpt, every rank creates the directory (not
    rank 0 alone, which the others raced), and a write goes to a temporary file renamed into place,
    so a reader sees a whole state or none, never part of one.

    workspace_path: the directory; None makes a workspace that is not initialised (is_initialized
    False; its reads and writes raise jobkit.InvalidArgumentError, a ValueError as ModelOpt's).
    """

    def __init__(self, workspace_path: Union[Path, str, None] = None) -> None:
        """Creates the directory and removes this rank's state left by an earlier run."""
        self.path = Path("") if workspace_path is None else Path(workspace_path)
        self._is_initialized = workspace_path is not None
        self.rank = jobkit.rank()
        if self._is_initialized:
            self.path.mkdir(parents=True, exist_ok=True)
            self.state_path = self._state_path(self.rank)
            self.state_path.unlink(missing_ok=True)

    @property
    def is_initialized(self) -> bool:
        """Whether the workspace has a directory (workspace_path was given)."""
        return self._is_initialized

    def _state_path(self, target_rank: int) -> Path:
        if not self._is_initialized:
            raise jobkit.InvalidArgumentError("NFSWorkspace is not initialized: workspace_path=None")
        if isinstance(target_rank, bool) or not isinstance(target_rank, int) or \
                not 0 <= target_rank < jobkit.world_size():
            raise jobkit.InvalidArgumentError(f"NFSWorkspace: target_rank={target_rank!r} is not a rank on "
                                              f"[0; {jobkit.world_size() - 1}]")
        return self.path.joinpath(f"rank_{target_rank}_state.pth")

    def write_configs_and_weights(self, config_json: Dict[str, Any], weights: Dict[str, Any]) -> None:
        """Replaces this rank's state with ``{"config": config_json, "weight": weights}``, atomically."""
        import torch

        path = self._state_path(self.rank)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(temporary, "wb") as f:
            torch.save({"config": config_json, "weight": weights}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)

    def read_configs_and_weights_from_rank(
            self, target_rank: int) -> Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]]]:
        """(config, weights) that ``target_rank`` wrote, loaded onto the CPU (torch.load with
        weights_only=True, as ModelOpt's safe_load); (None, None) when it wrote none."""
        import torch

        path = self._state_path(target_rank)
        if not path.exists():
            return None, None
        state = torch.load(path, map_location="cpu", weights_only=True)
        return state["config"], state["weight"]


def _members(function: str, ranks: Sequence[int], group: Any) -> List[int]:
    """ranks, checked: two or more distinct world ranks, this rank among them; a jobkit.Group as
    group holds the same ranks."""
    members = list(ranks)
    if len(members) < 2 or len(set(members)) != len(members) or \
            not all(isinstance(r, int) and not isinstance(r, bool) for r in members):
        raise jobkit.InvalidArgumentError(f"{function}: ranks={ranks!r}: two or more distinct world ranks")
    if jobkit.rank() not in members:
        raise jobkit.InvalidArgumentError(f"{function}: ranks={ranks!r} does not hold this rank, {jobkit.rank()}")
    if isinstance(group, jobkit.Group) and sorted(group.world_ranks) != sorted(members):
        raise jobkit.InvalidArgumentError(f"{function}: group={group!r} does not hold ranks={ranks!r}")
    return members


@contextmanager
def _gathered(function: str, mine: Any, ranks: Sequence[int], group: Any,
              workspace_path: Union[Path, str, None] = None) -> Iterator[Optional[List[Any]]]:
    """Every member's ``mine`` on ranks[0] (its own first, unpickled), None elsewhere; on leaving,
    a barrier over ``ranks`` so no member leaves before ranks[0] is done with the block."""
    members = _members(function, ranks, group)
    first = jobkit.rank() == members[0]
    states, _ = jobkit.node_local_gather(b"" if first else pickle.dumps(mine, pickle.HIGHEST_PROTOCOL),
                                         group=members, workspace=workspace_path)
    try:
        yield [mine] + [pickle.loads(payload) for _, payload in states[1:]] if first else None
    finally:
        jobkit.barrier(group=jobkit.make_group(members))


@contextmanager
def get_tensors_parallel(tensor: Any, ranks: List[int], group: Any = None) -> Iterator[List[Any]]:
    """Context manager: every rank's ``tensor`` (moved to the CPU) on ``ranks[0]``, in the order of
    ``ranks``; the other ranks get []. Every rank of ``ranks`` enters it; on leaving, each waits
    until ``ranks[0]`` has left too.

    group: ModelOpt's barrier group. jobkit synchronises exactly the members of ``ranks`` (a
    jobkit.Group must hold the same ranks; a torch ProcessGroup is accepted and not needed), where
    ModelOpt's group=None meant a barrier over every rank of the world. The ranks may span nodes.
    """
    if tensor is None:
        raise jobkit.InvalidArgumentError("get_tensors_parallel: tensor=None: a tensor is due")
    with _gathered("get_tensors_parallel", tensor.cpu(), ranks, group) as tensors:
        yield tensors or []


@contextmanager
def get_configs_parallel(config: Any, ranks: List[int], group: Any,
                         workspace_path: Union[Path, str, None] = None) -> Iterator[List[Any]]:
    """Context manager: the configs of every rank of ``ranks`` on ``ranks[0]`` (its own first,
    then the others' in the order of ``ranks``, those that passed None left out, as in ModelOpt);
    the other ranks get []. On leaving, each waits until ``ranks[0]`` has left too.

    config: any picklable object, returned as it was (ModelOpt turns its ModelConfig into JSON and
    weights and back). workspace_path: a shared directory for large configs of ranks on several
    nodes; on one node shared memory is used, and small configs go through jobkit's collectives
    (ModelOpt uses the directory whenever it is given). group: as in get_tensors_parallel.
    """
    with _gathered("get_configs_parallel", config, ranks, group, workspace_path) as configs:
        yield [] if configs is None else configs[:1] + [c for c in configs[1:] if c is not None]
