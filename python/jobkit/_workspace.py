"""Workspace and node-local gather (bytes) of ``import jobkit``: a shared directory where each rank
leaves a state for the others, and every member's state gathered to one rank by the cheapest route."""

import os as _os
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import List as _List
from typing import Literal as _Literal
from typing import Optional as _Optional
from typing import Sequence as _Sequence
from typing import Tuple as _Tuple
from typing import TypeVar as _TypeVar
from typing import Union as _Union

from . import _jobkit
from ._collectives import Group
from ._jobkit import InvalidArgumentError
from ._timeout import Timeout as _Seconds  # seconds or a timedelta (None: JOBKIT_TIMEOUT)
from ._timeout import timeout_ms as _timeout_ms

if _TYPE_CHECKING:
    from _typeshed import ReadableBuffer as _ReadableBuffer  # bytes, bytearray, memoryview, array.array, ...
    from _typeshed import StrPath as _StrPath  # str or os.PathLike[str]
_H = _TypeVar("_H")
# Workspace's and node_local_gather's group: None or "world" (every rank), "node", world ranks or a Group
_Members = _Union[None, _Literal["world", "node"], _Sequence[int], Group]  # noqa: F821  (Literal's strings are no names)


def _members(group: _Members) -> _Union[None, str, _List[int]]:
    """A Workspace's or node_local_gather's group= for the extension: a Group as its world ranks."""
    if isinstance(group, Group):
        return group.world_ranks
    if group is None or isinstance(group, str):
        return group
    return [int(r) for r in group]


def _payload(payload: "_ReadableBuffer") -> bytes:
    """payload's bytes; an int is refused (bytes(5) would be five zero bytes)."""
    if isinstance(payload, int):
        raise InvalidArgumentError(f"payload={payload!r}: bytes or another buffer, not an int")
    return bytes(payload)


def _open(handle: "_Optional[_H]", what: str) -> "_H":
    """handle, unless `what` was closed."""
    if handle is None:
        raise InvalidArgumentError(f"this {what} is closed (close() or the end of its with block)")
    return handle


class Workspace:
    """A shared directory where each rank leaves a state (config text + payload bytes) for the
    others (jobkit::workspace). Collective to create; close() (or the end of a ``with`` block)
    removes this rank's files; the last rank's, the directory. Close it when no rank reads anymore
    (e.g. after a barrier).

    group: None (every rank), "node", a list of world ranks, or a jobkit.Group.
    """

    def __init__(self, root: "_StrPath", group: _Members = None, timeout: _Seconds = None) -> None:
        # None once closed: a later call fails with InvalidArgumentError
        self._ws: _Optional[_jobkit.Workspace] = _jobkit.Workspace(_os.fspath(root), _members(group),
                                                                   _timeout_ms(timeout))

    def write(self, payload: "_ReadableBuffer", config: str = "") -> None:
        _open(self._ws, "Workspace").write(_payload(payload), config)

    def read(self, rank: int, timeout: _Seconds = None) -> _Tuple[str, bytes]:
        """(config, payload) of group rank `rank`, waiting until it exists."""
        return _open(self._ws, "Workspace").read(rank, _timeout_ms(timeout))

    def path_of(self, rank: int) -> str:
        return _open(self._ws, "Workspace").path_of(rank)

    @property
    def directory(self) -> str:
        return _open(self._ws, "Workspace").directory

    def close(self) -> None:
        self._ws = None

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: object) -> _Literal[False]:
        self.close()
        return False


def node_local_gather(payload: "_ReadableBuffer", config: str = "", group: _Members = None,
                      workspace: "_Optional[_StrPath]" = None, collective_max_bytes: int = 4 << 20,
                      timeout: _Seconds = None) -> _Tuple[_List[_Tuple[str, bytes]], str]:
    """Every member's (config, payload) to the group's rank 0, in group-rank order, through
    shared memory on one node, else collectives or a workspace under `workspace` for large states.
    Returns (states, route): states is a list on the group's rank 0 and [] elsewhere; route is
    "shared_memory", "workspace" or "collectives"."""
    where = "" if workspace is None else _os.fspath(workspace)
    return _jobkit.node_local_gather(_payload(payload), config, _members(group), where, collective_max_bytes,
                                     _timeout_ms(timeout))
