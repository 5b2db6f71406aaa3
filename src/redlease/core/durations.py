"""Durations: seconds (``15``, ``0.5``) or Kubernetes/Go-style strings (``15s``, ``1m30s``,
``500ms``, ``1h``). The one parser every duration flag, env var and pod annotation
(``redlease.dev/drain-timeout``) uses; in ``core`` so that the CLI and the injector share it."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ``ValueError`` for anything else (negative, empty, unknown unit)."""
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(raw):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(raw) or not raw:
            raise ValueError(text) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(text)
    return seconds


def positive_duration(text: str) -> float:
    """A duration > 0 (argparse ``type``)."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(text)
    return seconds


positive_duration.__name__ = "duration (15, 0.5, 15s, 1m30s, 500ms)"
