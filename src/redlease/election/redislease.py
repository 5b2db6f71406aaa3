"""A Redis lease as an elector's lock backend (:class:`~redlease.election.campaign.LockBackend`):
the public elector's and the sidecar's."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor
from typing import Any

from redlease.core import aio, locks
from redlease.core.lease import Lease
from redlease.core.state import LockState
from redlease.core.term import classify
from redlease.election.campaign import Granted, Refused
from redlease.errors import LockContention


class RedisLease:
    """A Redis lease as a :class:`LockBackend`: ``lock`` is a ``Lock``, ``MultiLock`` or
    (asyncio) a counting ``Semaphore`` (one of its slots), asyncio
    (:mod:`redlease.core.aio`) or blocking (:mod:`redlease.core.locks`: give ``offload``, the
    executor its calls run on, one at a time: one worker). An acquire waits at most ``wait``
    seconds for a release (a release hands the lease over at once: notified, not polled); a
    renewal waits at most ``renew_timeout`` for Redis (None: the client's socket timeout).
    A refusal names the holder the script saw (:class:`Refused`), no extra round trip."""

    def __init__(
        self,
        lock: aio.Lock | aio.MultiLock | aio.Semaphore | locks.Lock | locks.MultiLock,
        wait: float = 0.0,
        *,
        renew_timeout: float | None = None,
        offload: Executor | None = None,
    ) -> None:
        self.lock = lock
        self.wait = wait
        self.renew_timeout = renew_timeout
        self.offload = offload

    async def _call(self, method: str, **kwargs: Any) -> Any:
        call = getattr(self.lock, method)
        if self.offload is None:
            return await call(**kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.offload, functools.partial(call, **kwargs))

    async def holder(self) -> str | None:
        """Who holds the lock now, from the lock view (one read: an elector's start)."""
        state: LockState = await self._call("state")
        return state.holder

    async def acquire(self, wait: float | None = None) -> Granted[Lease] | Refused:
        if self.lock.lease() is not None:
            # a blocking lock's acquire runs on in its worker after the attempt's bound and
            # may be granted: that lease is ours, renew it (an expired one is forgotten)
            return await self.renew()
        wait = self.wait if wait is None else wait
        try:
            lease: Lease = await self._call("acquire", timeout=wait)
        except LockContention as exc:
            return Refused(exc.holder, waited=wait > 0)
        return Granted(lease.sent_at, lease, lease.deadline)

    async def renew(self) -> Granted[Lease] | Refused:
        lease: Lease = await self._call("extend", timeout=self.renew_timeout)
        return Granted(lease.sent_at, lease, lease.deadline)

    async def release(self) -> bool:
        if self.lock.lease() is None:
            return False
        await self._call("release")
        return True

    def loss(self, exc: BaseException) -> str | None:
        return classify(exc)
