"""The status document's ``version`` and the wake-up of long-polls (``GET /status?wait=&since=``).

``version`` is opaque: ``<boot>.<n>``, where ``boot`` is random per process (a restarted sidecar
never repeats an earlier one's versions, also in a state file left behind) and ``n`` counts the
changes of what the document says. What moves by itself is left out (:data:`TICKING`: the
countdown ``expires_in_ms``, also each holder's in ``holders``, and ``renewed_at`` /
``leader_until``, which move on every renewal),
so a version is stable across renewals and changes with the leader, the holder, the fencing token,
the nodes' health, the candidates or the settings (tests/sidecar/test_changes.py). A change back
to an earlier content is a new version: a watcher never misses a change that came and went.

:meth:`Changes.stamp` is the one place a document gets its version; it wakes the waiters when the
version moves, so a long-poll is answered by the code that publishes, not by a polling loop.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

TICKING = frozenset({"expires_in_ms", "renewed_at", "leader_until", "version"})
MAX_WAIT = 60.0  # seconds: a longer ``wait`` is answered (unchanged) after this


class Changes:
    """Versions status documents and lets coroutines wait for the next version."""

    def __init__(self) -> None:
        self.boot = secrets.token_hex(4)
        self.count = 0
        self._last: str | None = None
        self._moved: asyncio.Event | None = None  # set (and replaced) when the version moves
        self.closed = False
        self.waiting = 0  # coroutines in wait() now

    @property
    def version(self) -> str:
        return f"{self.boot}.{self.count}"

    def stamp(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Set ``doc["version"]``: a new one if what ``doc`` says differs from the last stamped
        document (then every waiter wakes). Returns ``doc``."""
        said = json.dumps(_said(doc), sort_keys=True)
        if said != self._last:
            self._last = said
            self.count += 1
            self._wake()
        doc["version"] = self.version
        return doc

    async def wait(self, since: str, timeout: float) -> None:
        """Return once the version differs from ``since``, after ``timeout`` seconds, or when
        :meth:`close` is called."""
        if self.closed or since != self.version or timeout <= 0:
            return
        if self._moved is None:
            self._moved = asyncio.Event()
        moved = self._moved
        self.waiting += 1
        try:
            async with asyncio.timeout(timeout):
                await moved.wait()
        except TimeoutError:
            pass
        finally:
            self.waiting -= 1

    def close(self) -> None:
        """Shutting down: every waiter answers now."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set()


def _said(doc: dict[str, Any]) -> dict[str, Any]:
    """What ``doc`` says, without what ticks (the holders' countdowns too)."""
    said = {k: v for k, v in doc.items() if k not in TICKING}
    if isinstance(said.get("holders"), list):
        said["holders"] = [
            {k: v for k, v in h.items() if k not in TICKING} if isinstance(h, dict) else h
            for h in said["holders"]
        ]
    return said
