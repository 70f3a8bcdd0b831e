"""The logging integration: records carry the rank, lines start with "[rank: R] ", and DEBUG/INFO
records come only from the ranks JOBKIT_LOG_RANKS admits ("all", "main" (the default),
"local-main", or ranks and ranges such as "0,3-5"); WARNING and above come from every rank, as
jobkit's C++ logger does."""

import logging
import os

from . import _jobkit


class RankFilter(logging.Filter):
    """Admits DEBUG/INFO records on the ranks `ranks` names (default: JOBKIT_LOG_RANKS, else
    "main") and every WARNING+ record; adds record.rank, record.local_rank and record.hostname."""

    def __init__(self, ranks=None):
        super().__init__()
        from . import identity

        self._identity = identity()
        setting = ranks if ranks is not None else os.environ.get("JOBKIT_LOG_RANKS", "main")
        self._admitted = _jobkit.log_ranks_admit(setting)

    def filter(self, record):
        record.rank = self._identity.rank
        record.local_rank = self._identity.local_rank
        record.hostname = self._identity.hostname
        return record.levelno >= logging.WARNING or self._admitted


class RankFormatter(logging.Formatter):
    """A Formatter whose lines start with "[rank: R] " (jobkit.rank_prefixed_message: no prefix
    without a launcher)."""

    def format(self, record):
        from . import rank_prefixed_message

        return rank_prefixed_message(super().format(record))


def install_logging(logger=None, level=logging.INFO, fmt="%(levelname)s: %(message)s", ranks=None, stream=None):
    """One call: a stream handler (stderr by default) on `logger` (default: the root logger) with
    RankFilter(ranks) and RankFormatter(fmt), at `level`. Returns the handler."""
    target = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger)
    handler = logging.StreamHandler(stream)
    handler.addFilter(RankFilter(ranks))
    handler.setFormatter(RankFormatter(fmt))
    target.addHandler(handler)
    target.setLevel(level)
    return handler
