"""Python's cyclic garbage collector, paused while a refresh cycle holds every lock at once.

A cycle keeps each lock's prepared spec, read future and view alive from its start to its end
(one read per node for all of them), so with thousands of locks they outlive the collector's
young generations and are promoted to the oldest one; that in turn triggers full collections,
which walk the whole heap (kopf's body of every object). The cost per lock then grew with the
number of locks (docs/scale.md). Paused, the collector examines none of them: when the cycle
ends they are freed by reference counting, as they are acyclic, and the collector resumes with
what is left. What others make meanwhile waits for the collector (kopf's cyclic garbage of its
watch events, say), so a pause lasts :data:`LIMIT` seconds at most (:meth:`Pause.at_most`): a
cycle slower than that (a node timing out, an overloaded machine) pays the promotions again
instead of letting garbage pile up.

The pause is process-wide (so is the collector): nested and concurrent pauses (the refresh
loops of several kopf threads) resume it once the last one ends, and only if it was enabled
when the first began.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import AsyncIterator, Iterator

LIMIT = 3.0  # s: the longest pause of the collector (a cycle of 5,000 locks takes under 1 s)


class Pause:
    """Reentrant, thread-safe pause of the cyclic collector (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._resume:
                    gc.enable()

    def expire(self) -> None:
        """Resume the collector now (if a pause stopped it), though pauses are still open."""
        with self._lock:
            if self._depth and self._resume:
                self._resume = False
                gc.enable()

    @contextlib.asynccontextmanager
    async def at_most(self, seconds: float = LIMIT) -> AsyncIterator[None]:
        """The pause, ended by :meth:`expire` after ``seconds`` if the block still runs."""
        timer = asyncio.get_running_loop().call_later(seconds, self.expire)
        try:
            with self():
                yield
        finally:
            timer.cancel()


paused = Pause()  # the process's one pause: ``async with collector.paused.at_most(): ...``
