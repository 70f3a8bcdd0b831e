"""The rules of ``import jobkit`` for spans of time, written once: every collective, helper,
Workspace, StopGuard, Checkpoints, JobkitStore and ``jobkit.torch.init_process_group`` reads its
``timeout`` here, StopGuard its ``time_margin`` and time_left its ``max_age``.

A span is a number of seconds (an int, a float or another real number such as numpy's; a bool is
refused, though Python counts it an int) or a ``datetime.timedelta``; a timeout may also be None (the caller's default: JOBKIT_TIMEOUT
for jobkit's calls, 30 minutes for init_process_group, torch's). Its seconds keep the rules of the
C++ library (src/core/timeout.hpp): a timeout ``timeout_from_seconds``'s, more than 0, finite and
at most 1e9; a margin or an age ``duration_from_seconds``'s, 0 or more, finite and at most 1e9.
Anything else is a jobkit.InvalidArgumentError whose message starts ``[caller: ]name=value: ``.

Each timeout is checked once, here: its type, then the C++ rule through the extension. A jobkit
call passes the extension the rule's milliseconds (timeout_ms), which it takes as they are
(_jobkit.cpp's timeout_of), so that the message names the argument as the caller wrote it.
"""

from __future__ import annotations

import math as _math
import numbers as _numbers
from datetime import timedelta as _timedelta
from typing import Callable, Optional, Tuple, Union

from ._jobkit import (InvalidArgumentError, duration_from_seconds, duration_seconds_rule, longest_seconds,
                      timeout_from_seconds, timeout_seconds_rule)

Duration = Union[int, float, _timedelta]
Timeout = Union[None, Duration]


def _checked(span: Duration, name: str, caller: str, kinds: str, rule: Callable[[float], Optional[int]],
             rule_text: str, zero_is_none: bool = False) -> Tuple[float, int]:
    """span in seconds and in milliseconds (rounded up) when `rule` takes it, or
    InvalidArgumentError ``"[caller: ]name=span: why"``. With zero_is_none, a span of 0 is no
    timeout: the longest the rule takes."""
    where = f"{caller}: " if caller else ""
    if isinstance(span, _timedelta):
        value = span.total_seconds()
    elif isinstance(span, _numbers.Real) and not isinstance(span, bool):  # numpy's numbers too
        try:
            value = float(span)
        except OverflowError:  # an int past a double's range
            value = _math.inf if span > 0 else -_math.inf
    else:
        raise InvalidArgumentError(f"{where}{name}={span!r}: {kinds}")
    if zero_is_none and value == 0:
        value = longest_seconds  # the longest span the rules take: a wait with no timeout
    ms = rule(value)
    if ms is None:
        raise InvalidArgumentError(f"{where}{name}={span!r}: {rule_text}")
    return value, ms


def _timeout(timeout: Timeout, name: str, caller: str) -> Optional[Tuple[float, int]]:
    if timeout is None:
        return None
    return _checked(timeout, name, caller, "a number of seconds, a datetime.timedelta or None", timeout_from_seconds,
                    timeout_seconds_rule)


def seconds(timeout: Timeout, name: str = "timeout", caller: str = "") -> Optional[float]:
    """timeout in seconds (None stays None), or InvalidArgumentError ``"[caller: ]name=value: why"``."""
    checked = _timeout(timeout, name, caller)
    return None if checked is None else checked[0]


def timeout_ms(timeout: Timeout, name: str = "timeout", caller: str = "") -> Optional[int]:
    """A jobkit call's timeout for the extension: its milliseconds by the rule, rounded up (None stays
    None: JOBKIT_TIMEOUT), or InvalidArgumentError ``"[caller: ]name=value: why"``."""
    checked = _timeout(timeout, name, caller)
    return None if checked is None else checked[1]


def milliseconds(timeout: Duration, name: str = "timeout", caller: str = "", zero_is_none: bool = False) -> int:
    """A timeout that is never None (seconds()'s rule) in milliseconds, rounded up as the C++ library
    rounds it. With zero_is_none, 0 (torch's ``Store::kNoTimeout``) is no timeout: the longest wait
    the rule takes, 1e9 s."""
    return _checked(timeout, name, caller, "a number of seconds or a datetime.timedelta", timeout_from_seconds,
                    timeout_seconds_rule, zero_is_none)[1]


def duration_ms(span: Duration, name: str, caller: str = "") -> int:
    """A margin's or an age's span (0: none) in milliseconds by the rule of spans, rounded up, for the
    extension, or InvalidArgumentError ``"[caller: ]name=value: why"``."""
    return _checked(span, name, caller, "a number of seconds or a datetime.timedelta", duration_from_seconds,
                    duration_seconds_rule)[1]
