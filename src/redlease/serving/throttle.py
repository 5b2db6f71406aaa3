"""One log line per kind of event per interval (pure: the caller passes the time in)."""

from __future__ import annotations


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
