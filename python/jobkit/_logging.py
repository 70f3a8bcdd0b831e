"""The logging integration: records carry the rank, lines start with "[rank: R] ", and DEBUG/INFO
records come only from the ranks JOBKIT_LOG_RANKS admits ("all", "main" (the default),
"local-main", or ranks and ranges such as "0,3-5"); WARNING and above come from every rank, as
jobkit's C++ logger does. rank_zero_only, rank_zero_info and rank_zero_warn act on global rank 0
only, without any communication (Lightning's)."""

from __future__ import annotations

import functools
import logging
import os
import warnings
from typing import IO, TYPE_CHECKING, Callable, Optional, Type, TypeVar, Union

from . import _jobkit

if TYPE_CHECKING:
    from typing_extensions import ParamSpec  # typing's from Python 3.10; type checkers only

    _P = ParamSpec("_P")
    _Handler = logging.StreamHandler[IO[str]]
else:
    _Handler = logging.StreamHandler
_T = TypeVar("_T")


def _global_rank() -> int:
    from . import identity

    return identity().rank


class RankFilter(logging.Filter):
    """Admits DEBUG/INFO records on the ranks `ranks` names (default: JOBKIT_LOG_RANKS, else
    "main") and every WARNING+ record; adds record.global_rank (also as record.rank),
    record.local_rank, record.node_rank and record.hostname."""

    def __init__(self, ranks: Optional[str] = None) -> None:
        super().__init__()
        from . import identity

        self._identity = identity()
        setting = ranks if ranks is not None else os.environ.get("JOBKIT_LOG_RANKS", "main")
        self._admitted = _jobkit.log_ranks_admit(setting)

    def filter(self, record: logging.LogRecord) -> bool:
        me = self._identity
        record.__dict__.update(global_rank=me.rank, rank=me.rank, local_rank=me.local_rank, node_rank=me.node_rank,
                               hostname=me.hostname)
        return record.levelno >= logging.WARNING or self._admitted


class RankFormatter(logging.Formatter):
    """A Formatter whose lines start with "[rank: R] " (jobkit.rank_prefixed_message: no prefix
    without a launcher)."""

    def format(self, record: logging.LogRecord) -> str:
        from . import rank_prefixed_message

        return rank_prefixed_message(super().format(record))


class _RankHandler(_Handler):
    """The handler install_logging adds; its class marks it, so that a second call replaces it."""


def install_logging(logger: Union[logging.Logger, str, None] = None, level: Union[int, str] = logging.INFO,
                    fmt: str = "%(levelname)s: %(message)s", ranks: Optional[str] = None,
                    stream: Optional[IO[str]] = None) -> logging.Handler:
    """One call: a stream handler (stderr by default) on `logger` (default: the root logger; a
    name is looked up) with RankFilter(ranks) and RankFormatter(fmt), at `level`. Returns the
    handler. Idempotent: a handler that an earlier call added to the same logger is replaced, so
    the logger keeps one, with this call's settings. Formats can use %(global_rank)s,
    %(local_rank)s, %(node_rank)s and %(hostname)s."""
    target = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger)
    for old in [h for h in target.handlers if isinstance(h, _RankHandler)]:
        target.removeHandler(old)
    handler = _RankHandler(stream)
    handler.addFilter(RankFilter(ranks))
    handler.setFormatter(RankFormatter(fmt))
    target.addHandler(handler)
    target.setLevel(level)
    return handler


def rank_zero_only(fn: Callable[_P, _T]) -> Callable[_P, Optional[_T]]:
    """Decorator: the function runs on global rank 0 only and returns its result there; the other
    ranks skip it and return None. No communication (unlike jobkit.main_process_only, which hands
    rank 0's result to every rank): safe in code that only some ranks reach. Lightning's
    rank_zero_only."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> Optional[_T]:
        if _global_rank() == 0:
            return fn(*args, **kwargs)
        return None

    return wrapper


def rank_zero_info(message: object, *args: object, logger: Union[logging.Logger, str, None] = "jobkit") -> None:
    """logger.info(message, *args) on global rank 0 only (default: the logger "jobkit"); the
    record names the caller's file and line."""
    if _global_rank() == 0:
        target = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger)
        target.info(message, *args, stacklevel=2)


def rank_zero_warn(message: Union[str, Warning], category: Type[Warning] = UserWarning, stacklevel: int = 1) -> None:
    """warnings.warn(message, category) on global rank 0 only; stacklevel 1 names the caller of
    rank_zero_warn."""
    if _global_rank() == 0:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
