"""The timeout rule of ``import jobkit``, written once: every collective, helper, Workspace, StopGuard,
Checkpoints and ``jobkit.torch.init_process_group`` reads its ``timeout`` here.

A timeout is a number of seconds (an int or a float; a bool is refused, though Python counts it an
int), a ``datetime.timedelta``, or None (the caller's default: JOBKIT_TIMEOUT for jobkit's calls, 30
minutes for init_process_group, torch's). Its seconds keep the rule of every timeout jobkit reads,
the C++ library's (``timeout_from_seconds``, src/core/timeout.hpp): more than 0, finite and at most
1e9. Anything else is a jobkit.InvalidArgumentError whose message starts ``name=value: ``.
"""

from __future__ import annotations

from datetime import timedelta as _timedelta
from typing import Optional, Union

from ._jobkit import InvalidArgumentError, timeout_from_seconds, timeout_seconds_rule

Timeout = Union[None, int, float, _timedelta]


def seconds(timeout: Timeout, name: str = "timeout", caller: str = "") -> Optional[float]:
    """timeout in seconds (None stays None), or InvalidArgumentError ``"[caller: ]name=value: why"``."""
    if timeout is None:
        return None
    where = f"{caller}: " if caller else ""
    if isinstance(timeout, _timedelta):
        value = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        value = float(timeout)
    else:
        raise InvalidArgumentError(f"{where}{name}={timeout!r}: a number of seconds, a datetime.timedelta or None")
    if timeout_from_seconds(value) is None:
        raise InvalidArgumentError(f"{where}{name}={timeout!r}: {timeout_seconds_rule}")
    return value
