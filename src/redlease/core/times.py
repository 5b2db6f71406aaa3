"""RFC 3339 times: epoch seconds to UTC text (``2026-01-02T03:04:05.678Z``) and back.

Pure. Every time redlease writes or reads as text goes through here: the lock view's stamps
(milliseconds), Kubernetes ``Time`` fields (seconds: Event timestamps, the DistributedLock
status) and ``MicroTime`` fields (microseconds: a Lease's acquire and renew times, an Event's
``eventTime``). Written in UTC with a ``Z``; read with any offset. In the core, not in
:mod:`redlease.kube`, because the lock view (core) writes these times too.
"""

from __future__ import annotations

import datetime as _dt
from typing import Literal

Precision = Literal["seconds", "milliseconds", "microseconds"]


def format_time(seconds: float, precision: Precision = "seconds") -> str:
    """Epoch ``seconds`` as RFC 3339 UTC text, cut (not rounded) to ``precision``."""
    stamp = _dt.datetime.fromtimestamp(seconds, tz=_dt.UTC)
    return stamp.isoformat(timespec=precision).replace("+00:00", "Z")


def parse_time(text: object) -> float | None:
    """RFC 3339 text as epoch seconds; None if absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
