"""ModelOpt's ``modelopt.torch.export.distribute`` on jobkit: the same names, signatures and defaults.

Porting is one import line::

    from jobkit.compat import modelopt as distribute   # was: from modelopt.torch.export import distribute

The ranks come from jobkit's identity (PMIx), not from torch.distributed. get_tensors_parallel and
get_configs_parallel gather through jobkit.node_local_gather: POSIX shared memory whose names are
scoped to the job and step (ModelOpt's ``rank_<r>`` collide between two jobs on a node and with a
crashed run's leftovers), jobkit's collectives or a workspace when the ranks span several nodes
(ModelOpt's shared memory works on one node only), deadlines (JOBKIT_TIMEOUT) instead of hangs, and
an error on every member when one fails (before the gather: the members agree on each one's
outcome first). Objects travel as pickles.
"""

from __future__ import annotations

import json
import os
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import jobkit

__all__ = ["NFSWorkspace", "get_configs_parallel", "get_tensors_parallel"]


class NFSWorkspace:
    """A directory on a shared file system (NFS) where each rank leaves its config and weights
    for the others: ``<workspace_path>/rank_<rank>_state.pth``, written with torch.save.

    As in ModelOpt, nothing here is collective nor synchronised: the caller makes the readers wait
    for the writers (e.g. jobkit.barrier()). Unlike ModelOpt, every rank creates the directory (not
    rank 0 alone, which the others raced), and a write goes to a temporary file renamed into place,
    so a reader sees a whole state or none, never part of one.

    The config is stored as JSON text (``{"config_text": json.dumps(config_json), "weight":
    weights}``), where ModelOpt pickles the dict: torch 1.13's weights_only=True loader refuses
    every Python float, which configs are full of. So config_json must be JSON: its keys strings
    (jobkit.InvalidArgumentError otherwise) and tuples come back as lists. The weights are tensors,
    saved and loaded by torch as in ModelOpt. ModelOpt's own reader finds no "config" in these
    files; this one reads ModelOpt's too.

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
        text = _json_text(config_json)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(temporary, "wb") as f:
            torch.save({"config_text": text, "weight": weights}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)

    def read_configs_and_weights_from_rank(
            self, target_rank: int) -> Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]]]:
        """(config, weights) that ``target_rank`` wrote, loaded onto the CPU (torch.load with
        weights_only=True, as ModelOpt's safe_load; the config from its JSON text); (None, None)
        when it wrote none. A state that ModelOpt wrote (its config a dict) is read too."""
        import torch

        path = self._state_path(target_rank)
        if not path.exists():
            return None, None
        state = torch.load(path, map_location="cpu", weights_only=True)
        config = json.loads(state["config_text"]) if "config_text" in state else state["config"]
        return config, state["weight"]


def _check_keys(value: Any, where: str) -> None:
    """Refuses a dict key that is not a string anywhere in value (JSON would turn it into one)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise jobkit.InvalidArgumentError(f"{where}: key {key!r} is not a string (the config is stored as "
                                                  "JSON)")
            _check_keys(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_keys(item, f"{where}[{index}]")


def _json_text(config_json: Any) -> str:
    """config_json as JSON text; jobkit.InvalidArgumentError if it is not JSON."""
    _check_keys(config_json, "config_json")
    try:
        return json.dumps(config_json)
    except (TypeError, ValueError) as e:
        raise jobkit.InvalidArgumentError(f"config_json: {e} (the config is stored as JSON)") from e


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


def _group(members: List[int], group: Any) -> Any:
    """A jobkit.Group of members in their order: group itself when it is one, else a new one."""
    if isinstance(group, jobkit.Group) and group.world_ranks == members:
        return group
    return jobkit.make_group(members)


def _prepare(make: Callable[[], Any], first: bool) -> Tuple[Any, bytes, Optional[Exception]]:
    """(mine, its pickle, None), the pickle empty on the first member (it keeps its own); or
    (None, b"", the exception) when make() or the pickling fails."""
    try:
        mine = make()
        return mine, b"" if first else pickle.dumps(mine, pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # every member hears of it (_agree), then it is raised here
        return None, b"", e


def _agree(function: str, error: Optional[Exception], members: List[int], group: Any) -> None:
    """Every member's outcome on every member: raises this member's own error, or
    jobkit.PeerFailureError naming the members that failed, so that all leave together."""
    outcomes = jobkit.all_gather_object(None if error is None else f"{type(error).__name__}: {error}", group=group)
    if error is not None:
        raise error
    failed = [f"rank {rank}: {text}" for rank, text in zip(members, outcomes) if text is not None]
    if failed:
        raise jobkit.PeerFailureError(f"{function}: a member failed before the gather: " + "; ".join(failed))


@contextmanager
def _gathered(function: str, make: Callable[[], Any], ranks: Sequence[int], group: Any,
              workspace_path: Union[Path, str, None] = None) -> Iterator[Optional[List[Any]]]:
    """Every member's make() on ranks[0] (its own first, unpickled), None elsewhere; on leaving, a
    barrier over ``ranks`` so no member leaves before ranks[0] is done with the block. A failure
    of make() or of its pickling on any member raises on every member before the gather."""
    members = _members(function, ranks, group)
    first = jobkit.rank() == members[0]
    together = _group(members, group)
    mine, payload, error = _prepare(make, first)
    _agree(function, error, members, together)
    states, _ = jobkit.node_local_gather(payload, group=together, workspace=workspace_path)
    try:
        yield [mine] + [pickle.loads(data) for _, data in states[1:]] if first else None
    finally:
        jobkit.barrier(group=together)


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
    with _gathered("get_tensors_parallel", lambda: tensor.cpu(), ranks, group) as tensors:
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
    with _gathered("get_configs_parallel", lambda: config, ranks, group, workspace_path) as configs:
        yield [] if configs is None else configs[:1] + [c for c in configs[1:] if c is not None]
