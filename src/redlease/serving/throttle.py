"""One log line per kind of event per interval: :class:`Throttle` (pure: the caller passes the
time in) and :class:`RateLimit`, the logging filter over it."""

from __future__ import annotations

import logging
import time


class Throttle:
    """Lets an event of each ``key`` through at most once per ``interval`` seconds and counts
    the ones it held back, so the next line that passes can say how many there were."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def allow(self, key: str, now: float) -> int | None:
        """``None``: hold this one back; else pass it, with the number held back since the
        last one that passed."""
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._held.pop(key, 0)


class RateLimit(logging.Filter):
    """Lets the same message through at most once per ``interval`` seconds (a
    :class:`~redlease.serving.throttle.Throttle`); the next one that passes says how many were
    suppressed."""

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__()
        self.throttle = Throttle(interval)

    def filter(self, record: logging.LogRecord) -> bool:
        skipped = self.throttle.allow(f"{record.name}:{record.msg}", time.monotonic())
        if skipped is None:
            return False
        if skipped:
            record.msg = f"{record.msg} (and {skipped} more like it)"
        return True
