"""Who runs what (``import jobkit``'s helpers): the main rank first, once per node, rank 0 first, n
at a time, one rank per file system.

Nesting follows the C++ rule (jobkit/helpers.hpp): a helper nested in main_process_only /
run_on_main, or once-per-node helpers nested in once_per_node, just run their function; other
nestings, and a world collective inside a section that some ranks skip, raise
jobkit.InvalidArgumentError at once instead of hanging.
"""

import functools as _functools
import os as _os
import pickle as _pickle
from types import TracebackType as _TracebackType
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any
from typing import Callable as _Callable
from typing import ContextManager as _ContextManager
from typing import Iterable as _Iterable
from typing import List as _List
from typing import Literal as _Literal
from typing import Mapping as _Mapping
from typing import Optional as _Optional
from typing import Type as _Type
from typing import TypeVar as _TypeVar
from typing import Union as _Union
from typing import cast as _cast
from typing import overload as _overload

from . import _jobkit
from ._jobkit import InvalidArgumentError
from ._timeout import Timeout as _Seconds  # seconds or a timedelta (None: JOBKIT_TIMEOUT)
from ._timeout import timeout_ms as _timeout_ms

if _TYPE_CHECKING:
    from _typeshed import StrPath as _StrPath  # str or os.PathLike[str]
    from typing_extensions import ParamSpec as _ParamSpec  # typing's from Python 3.10; type checkers only

    _P = _ParamSpec("_P")
_T = _TypeVar("_T")
_U = _TypeVar("_U")

_PROTOCOL = _pickle.HIGHEST_PROTOCOL


def _call(func: _Callable[..., _T], args: _Optional[_Iterable[_Any]], kwargs: _Optional[_Mapping[str, _Any]]) -> _T:
    return func(*(args or ()), **(kwargs or {}))


def _check_args(helper: str, args: object) -> None:
    if callable(args):
        raise InvalidArgumentError(f"{helper}: args is a callable; SpeechBrain's signature is "
                                   f"{helper}(func, args=None, kwargs=None, post_func=None, ...): "
                                   "pass post_func= by name")


@_overload
def main_process_only(function: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _T]":
    ...


@_overload
def main_process_only(function: None = None, *,
                      timeout: _Seconds = None) -> "_Callable[[_Callable[_P, _T]], _Callable[_P, _T]]":
    ...


def main_process_only(
        function: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None
) -> "_Union[_Callable[_P, _T], _Callable[[_Callable[_P, _T]], _Callable[_P, _T]]]":
    """Decorator: the function runs on the main rank only; every rank returns its result
    (SpeechBrain's main_process_only). ``@main_process_only`` or ``@main_process_only(timeout=60)``."""
    def decorate(fn: "_Callable[_P, _T]") -> "_Callable[_P, _T]":
        @_functools.wraps(fn)
        def wrapper(*args: "_P.args", **kwargs: "_P.kwargs") -> _T:
            holder: _List[_T] = []

            def run() -> bytes:
                holder.append(fn(*args, **kwargs))
                return _pickle.dumps(holder[0], _PROTOCOL)

            data = _jobkit.main_process_only_bytes(run, _timeout_ms(timeout))
            return holder[0] if holder else _cast(_T, _pickle.loads(data))

        return wrapper

    return decorate(function) if function is not None else decorate


def run_on_main(func: _Callable[..., _T], args: _Optional[_Iterable[_Any]] = None,
                kwargs: _Optional[_Mapping[str, _Any]] = None, post_func: _Optional[_Callable[..., object]] = None,
                post_args: _Optional[_Iterable[_Any]] = None, post_kwargs: _Optional[_Mapping[str, _Any]] = None,
                run_post_on_main: bool = False, timeout: _Seconds = None) -> _T:
    """SpeechBrain's run_on_main: func on the main rank, a barrier, then post_func on the other
    ranks followed by a barrier (or on every rank at once, no barrier, with run_post_on_main).
    Returns func's result on every rank."""
    _check_args("run_on_main", args)
    holder: _List[_T] = []

    def run() -> bytes:
        holder.append(_call(func, args, kwargs))
        return _pickle.dumps(holder[0], _PROTOCOL)

    def post() -> None:
        if post_func is not None:
            _call(post_func, post_args, post_kwargs)

    data = _jobkit.run_on_main_bytes(run, post, run_post_on_main, _timeout_ms(timeout))
    return holder[0] if holder else _cast(_T, _pickle.loads(data))


@_overload
def once_per_node(function: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _Optional[_T]]":
    ...


@_overload
def once_per_node(function: None = None, *,
                  timeout: _Seconds = None) -> "_Callable[[_Callable[_P, _T]], _Callable[_P, _Optional[_T]]]":
    ...


def once_per_node(
        function: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None
) -> "_Union[_Callable[_P, _Optional[_T]], _Callable[[_Callable[_P, _T]], _Callable[_P, _Optional[_T]]]]":
    """Decorator: the function runs on local rank 0 of every node, which returns its result; the
    other ranks wait for their node's runner and return None (SpeechBrain's once_per_node). An
    exception on the runner reaches the node's other ranks as jobkit.PeerFailureError."""
    def decorate(fn: "_Callable[_P, _T]") -> "_Callable[_P, _Optional[_T]]":
        @_functools.wraps(fn)
        def wrapper(*args: "_P.args", **kwargs: "_P.kwargs") -> _Optional[_T]:
            holder: _List[_Optional[_T]] = [None]

            def run() -> None:
                holder[0] = fn(*args, **kwargs)

            _jobkit.once_per_node(run, _timeout_ms(timeout))
            return holder[0]

        return wrapper

    return decorate(function) if function is not None else decorate


def run_once_per_node(func: _Callable[..., _T], args: _Optional[_Iterable[_Any]] = None,
                      kwargs: _Optional[_Mapping[str, _Any]] = None, post_func: _Optional[_Callable[..., _U]] = None,
                      post_args: _Optional[_Iterable[_Any]] = None, post_kwargs: _Optional[_Mapping[str, _Any]] = None,
                      run_post_on_all: bool = False, timeout: _Seconds = None) -> _Union[_T, _U, None]:
    """SpeechBrain's run_once_per_node: func on local rank 0 of every node, a barrier over all
    ranks, then post_func on the other ranks followed by a barrier (or on every rank, no barrier,
    with run_post_on_all). Returns func's result where it ran, replaced by post_func's where that
    ran (None elsewhere)."""
    _check_args("run_once_per_node", args)
    holder: _List[_Union[_T, _U, None]] = [None]

    def run() -> None:
        holder[0] = _call(func, args, kwargs)

    def post() -> None:
        if post_func is not None:
            holder[0] = _call(post_func, post_args, post_kwargs)

    _jobkit.run_once_per_node(run, post, run_post_on_all, _timeout_ms(timeout))
    return holder[0]


class _FirstThenOthers:
    """What zero_first and local_zero_first return: a callable (with fn) or a context manager
    (without); the public types are their overloads'."""

    def __init__(self, per_node: bool, fn: _Optional[_Callable[..., _Any]], timeout: _Seconds) -> None:
        self._per_node = per_node
        self._fn = fn
        self._timeout = timeout
        self._stage: _Optional[_jobkit.FirstThenOthers] = None

    def __call__(self, *args: _Any, **kwargs: _Any) -> _Any:
        holder: _List[_Any] = [None]

        def run() -> None:
            holder[0] = _cast(_Callable[..., _Any], self._fn)(*args, **kwargs)  # fn is None: misuse, a TypeError

        (_jobkit.local_zero_first if self._per_node else _jobkit.zero_first)(run, _timeout_ms(self._timeout))
        return holder[0]

    def __enter__(self) -> "_FirstThenOthers":
        if self._fn is not None:
            raise InvalidArgumentError("zero_first(fn) is called, not entered: use `with zero_first():`")
        if self._stage is not None:
            raise InvalidArgumentError("this zero_first() is entered already: write `with zero_first():` for each block")
        self._stage = _jobkit.FirstThenOthers(self._per_node, _timeout_ms(self._timeout))
        self._stage.enter()
        return self

    def __exit__(self, kind: _Optional[_Type[BaseException]], value: _Optional[BaseException],
                 traceback: _Optional[_TracebackType]) -> _Literal[False]:
        stage, self._stage = self._stage, None  # set by __enter__, which refuses a second entry
        _cast(_jobkit.FirstThenOthers, stage).exit(None if kind is None else f"{kind.__name__}: {value}")
        return False


@_overload
def zero_first(fn: None = None, *, timeout: _Seconds = None) -> _ContextManager[_FirstThenOthers]:
    ...


@_overload
def zero_first(fn: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _T]":
    ...


def zero_first(fn: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None) -> _FirstThenOthers:
    """Rank 0 first, then every other rank (released when rank 0 is done).

    Two forms:
      ``with jobkit.zero_first(): body`` -- every rank runs the body; the others start it when
      rank 0 has left the block. A context manager cannot skip its body: if rank 0's body raises,
      the others do not wait for a deadline but raise jobkit.PeerFailureError at the ``with``.
      ``jobkit.zero_first(fn)`` -- returns a callable; calling it runs fn the same way and returns
      fn's result on each rank. This form skips fn on the other ranks when rank 0's fn raised
      (they raise jobkit.PeerFailureError instead), as the C++ helper does.
    axolotl's zero_first(is_main) takes the "first" predicate; here it is rank 0 (local rank 0 of
    every node: local_zero_first), and the barrier is the group's, never a global one per node.
    """
    return _FirstThenOthers(False, fn, timeout)


@_overload
def local_zero_first(fn: None = None, *, timeout: _Seconds = None) -> _ContextManager[_FirstThenOthers]:
    ...


@_overload
def local_zero_first(fn: "_Callable[_P, _T]", *, timeout: _Seconds = None) -> "_Callable[_P, _T]":
    ...


def local_zero_first(fn: "_Optional[_Callable[_P, _T]]" = None, *, timeout: _Seconds = None) -> _FirstThenOthers:
    """zero_first per node: local rank 0 of each node first, then that node's other ranks; nodes
    do not wait for each other. The same two forms as zero_first."""
    return _FirstThenOthers(True, fn, timeout)


def do_n_at_a_time(f: _Callable[[], _T], *, n: _Optional[int] = None, timeout: _Seconds = None) -> _T:
    """f() on every rank, at most n ranks at a time; each rank returns its own f()'s result.

    n=None: one rank per node at a time on any layout (cyclic and uneven included), where
    OLMo-core's default (n = number of nodes, rank % rounds) is one per node only on block layouts.
    """
    holder: _List[_Optional[_T]] = [None]

    def run() -> None:
        holder[0] = f()

    _jobkit.do_n_at_a_time(run, n, _timeout_ms(timeout))
    return _cast(_T, holder[0])  # run ran on every rank, or do_n_at_a_time raised


def fs_local_rank(directory: "_StrPath" = ".", timeout: _Seconds = None) -> int:
    """0 on exactly one rank per file system holding `directory`, counting up on the others.
    FS_LOCAL_RANK and OLMO_SHARED_FS=1 override as in OLMo-core; otherwise jobkit probes the
    directory (OLMo-core assumes: local rank, or global rank with OLMO_SHARED_FS). Collective."""
    return _jobkit.fs_local_rank(_os.fspath(directory), _timeout_ms(timeout))
