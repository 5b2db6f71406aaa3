"""Batch the per-lock status reads of one refresh cycle into one read per node.

The operator's refresh loop hands every DistributedLock to :meth:`Refresher.observe_all`,
which parks the requests until the next cycle. A cycle starts at most once per ``interval``
seconds and hands every parked request to :meth:`NodeReader.read` at once, so 1,000 locks on
one node cost a few pipelined round trips per cycle instead of 1,000.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from redlease.core.view import LockView
from redlease.kube.secretspec import Credentials
from redlease.kube.spec import LockSpec

Observation = tuple[LockView, float]  # the lock view and the wall-clock time of its read
ReadFn = Callable[[Sequence[tuple[LockSpec, Credentials | None]]], Awaitable[list[Observation]]]
_Pending = tuple[LockSpec, Credentials | None, "asyncio.Future[Observation]"]


class Refresher:
    """Cycle loop: wait for requests, keep the ``interval`` cadence, read them all at once."""

    def __init__(self, read: ReadFn, interval: float) -> None:
        self._read = read
        self.interval = interval
        self._pending: list[_Pending] = []
        self._arrived = asyncio.Event()
        self.cycles = 0
        self.last_cycle_end = time.monotonic()  # for the liveness probe
        self.last_cycle_size = 0
        self.last_cycle_wall: float | None = None  # epoch seconds (for /metrics)
        self._next_due = time.monotonic()  # when :meth:`due` returns next

    async def due(self) -> None:
        """Return once per ``interval`` (at once the first time, or when late): a caller that
        prepares its requests after this, then reads, holds them only through the read, not
        through the wait for the cadence."""
        delay = self._next_due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        self._next_due = max(self._next_due + self.interval, time.monotonic())

    async def observe(self, spec: LockSpec, creds: Credentials | None = None) -> Observation:
        """The lock's state as read by the next cycle."""
        fut: asyncio.Future[Observation] = asyncio.get_running_loop().create_future()
        self._pending.append((spec, creds, fut))
        self._arrived.set()
        return await fut

    async def observe_all(
        self, requests: Sequence[tuple[LockSpec, Credentials | None]]
    ) -> list[Observation]:
        """Each lock's state as read by the next cycle (one future each, no task)."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Observation]] = []
        for spec, creds in requests:
            fut: asyncio.Future[Observation] = loop.create_future()
            self._pending.append((spec, creds, fut))
            futures.append(fut)
        if not futures:
            return []
        self._arrived.set()
        try:
            await asyncio.wait(futures)
        except asyncio.CancelledError:
            for fut in futures:
                fut.cancel()
            raise
        failures = [fut.exception() for fut in futures]  # all retrieved, the first raised
        for exc in failures:
            if exc is not None:
                raise exc
        return [fut.result() for fut in futures]

    def stale(self, now: float | None = None) -> bool:
        """True when requests have waited several intervals without a cycle (a hung loop)."""
        now = time.monotonic() if now is None else now
        return bool(self._pending) and now - self.last_cycle_end > max(3 * self.interval, 30.0)

    async def run(self) -> None:
        """Run cycles until cancelled."""
        started = time.monotonic() - self.interval
        while True:
            await self._arrived.wait()
            delay = started + self.interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            batch, self._pending = self._pending, []
            self._arrived.clear()
            started = time.monotonic()
            live = [(s, c, f) for s, c, f in batch if not f.done()]
            if not live:
                continue
            try:
                results = await self._read([(s, c) for s, c, _ in live])
            except Exception as exc:  # noqa: BLE001 - a failed cycle fails its waiters, not the loop
                for _, _, fut in live:
                    if not fut.done():
                        fut.set_exception(exc)
            else:
                for (_, _, fut), obs in zip(live, results, strict=True):
                    if not fut.done():
                        fut.set_result(obs)
            self.cycles += 1
            self.last_cycle_size = len(live)
            self.last_cycle_end = time.monotonic()
            self.last_cycle_wall = time.time()
