"""The asyncio API: same classes and semantics as :mod:`redlease.core.locks`, awaited.

Works unchanged with ``redis.asyncio.Redis``, ``redis.asyncio.cluster.RedisCluster`` and an
asyncio :class:`redlease.quorum.NodeSet`. Ownership of a :class:`ReentrantLock` defaults to the
current task (never thread-local). Cancellation-safe: a cancelled acquire leaves no lease
behind; a cancelled release still releases before the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

from redlease.core import _async
from redlease.core import _log as log
from redlease.core.handlekinds import ReadWritePair, SemaphoreCore
from redlease.core.handles import HandleCore
from redlease.core.lease import Lease, RenewerBase
from redlease.core.multi import MultiCore
from redlease.core.state import LockState
from redlease.core.timing import REPLY_GRACE
from redlease.errors import LeaseLost, NotOwned

LostCallback = Callable[[LeaseLost], None]


class _AsyncHandle(HandleCore):
    """Awaitable operations over one asyncio Redis client (or a cluster, or a node set)."""

    plain = _async.AsyncNode
    asyncio = True

    @property
    def node(self) -> str:
        return self._node.name

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None, *, owner: Any = None
    ) -> Lease:
        """See :meth:`redlease.Lock.acquire`."""
        flow, cleanup, token = self._begin_acquire(
            owner, blocking, timeout, self._node.socket_timeout
        )
        grant = await _async.guarded(
            self._node, flow, cleanup, self.budget(timeout), self.cleanup_budget
        )
        return self._finish_acquire(owner, token, grant)

    async def release(self, *, owner: Any = None) -> None:
        """Release (one level of) the hold; completes even if the caller is cancelled.

        The release runs in the caller's task (no extra task on the fast path). If that task is
        cancelled meanwhile, a full release by owner token (idempotent) is run to completion in
        a shielded task before the cancellation propagates.
        """
        flow, held = self._begin_release(owner)
        budget = self.budget(held=held)
        try:
            await _async.drive(self._node, flow, budget=budget)
        except asyncio.CancelledError:
            retry = self._release_flow(held.token, True)
            again = self.budget(held=held)
            with contextlib.suppress(NotOwned):  # the first attempt may have gone through
                await _async.run_to_completion(
                    _async.drive(self._node, retry, budget=again), limit=again.cap + REPLY_GRACE
                )
            self._forget(owner, held)
            raise
        except NotOwned:
            self._forget(owner, held)
            raise
        self._finish_release(owner, held)

    async def extend(
        self, ttl: float | None = None, *, owner: Any = None, timeout: float | None = None
    ) -> Lease:
        """See :meth:`redlease.Lock.extend`."""
        flow, held = self._begin_extend(owner, ttl, timeout)
        try:
            result = await _async.drive(self._node, flow, budget=self.budget(timeout, held))
        except NotOwned:
            self._forget(owner, held)
            raise
        return self._finish_extend(held, result, ttl)

    async def state(self) -> LockState:
        return await _async.drive(self._node, self._state_flow(), budget=self.budget())  # type: ignore[no-any-return]

    async def locked(self) -> bool:
        """Whether anyone holds the lock now (one read of its state in Redis), as
        ``asyncio.Lock.locked()``; :meth:`owned` says whether this handle holds it."""
        return (await self.state()).held

    async def __aenter__(self) -> Lease:
        """``async with lock:`` acquires, keeps the lease renewed from a background task while
        the block runs (an :class:`AsyncRenewer`, as Redisson's watchdog) and releases it at
        the end. If the lease is lost, the block is cancelled and exits with
        :class:`LeaseLost` (as :meth:`hold`)."""
        lease = await self.acquire()
        key = self._owner_key(None)
        running = self._watchdogs.get(key)
        if running is None or running.lost.is_set():
            self._watchdogs[key] = AsyncRenewer(self, guard=asyncio.current_task()).start()
        return lease

    async def __aexit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        renewer = None
        if self.count() <= 1:
            renewer = self._watchdogs.pop(self._owner_key(None), None)
            if renewer is not None:
                await renewer.stop()
        lost = renewer is not None and renewer.cancelled_guard
        if lost and t is not None and issubclass(t, asyncio.CancelledError):
            error = block_lost(self.name)
            with contextlib.suppress(NotOwned):
                await self.release()
            raise error from None
        await self.release()

    @asynccontextmanager
    async def hold(
        self,
        timeout: float | None = None,
        *,
        renew: bool = True,
        on_lost: LostCallback | None = None,
        fraction: float = 1 / 3,
        owner: Any = None,
    ) -> AsyncIterator[Lease]:
        """Acquire, renew in a background task, release on exit.

        If the lease is lost, the task running the ``async with`` body is cancelled and the
        block exits with :class:`LeaseLost` (not a bare ``CancelledError``).
        """
        lease = await self.acquire(timeout=timeout, owner=owner)
        guarded = asyncio.current_task()
        renewer = (
            AsyncRenewer(self, on_lost=on_lost, fraction=fraction, owner=owner, guard=guarded)
            if renew
            else None
        )
        try:
            if renewer:
                renewer.start()
            try:
                yield lease
            except asyncio.CancelledError:
                if renewer and renewer.cancelled_guard and guarded is not None:
                    raise block_lost(self.name) from None
                raise
        finally:
            if renewer:
                await renewer.stop()
            try:
                await self.release(owner=owner)
            except NotOwned:
                log.warning("lease already lost at release", lock=self.name)


class Semaphore(SemaphoreCore, _AsyncHandle):
    """A counting semaphore; see :class:`redlease.Semaphore`."""


class Lock(_AsyncHandle):
    """A mutex lease with fencing tokens. One hold per instance (not reentrant)."""


class MultiLock(MultiCore, _AsyncHandle):
    """One mutex lease over several lock names; see :class:`redlease.MultiLock`."""

    async def states(self) -> dict[str, LockState]:
        """The live state of each lock name."""
        return await _async.drive(self._node, self._states_flow(), budget=self.budget())  # type: ignore[no-any-return]


class ReentrantLock(_AsyncHandle):
    """Reentrant lease; the owner defaults to the current asyncio task."""

    kind = "reentrant"

    def _owner_key(self, owner: Any) -> Any:
        return asyncio.current_task() if owner is None else owner


class ReadLock(_AsyncHandle):
    kind = "read"
    public = "ReadWriteLock"


class WriteLock(_AsyncHandle):
    kind = "write"
    public = "ReadWriteLock"


class ReadWriteLock(ReadWritePair[ReadLock, WriteLock]):
    """Many readers or one writer; ``reader()``/``writer()`` return fresh handles."""

    reader_class = ReadLock
    writer_class = WriteLock


def block_lost(lock: str, why: str = "lease lost") -> LeaseLost:
    """What a block guarded by a lease (``async with lock``, :meth:`Lock.hold`, an elector's
    ``leading()``) exits with once the lease is lost and its task was cancelled for it: that
    cancellation taken back (``uncancel``), :class:`LeaseLost` raised instead of a bare
    ``CancelledError``."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return LeaseLost(lock, f"{why}; the guarded block was cancelled")


class AsyncRenewer(RenewerBase):
    """Extends a held lease at ``fraction`` of its TTL from an asyncio task.

    On loss: the lease is marked lost, a log line is written, ``on_lost`` is called and the
    ``guard`` task (if any) is cancelled. No extend waits past the local deadline.
    """

    def __init__(
        self,
        handle: _AsyncHandle,
        *,
        on_lost: LostCallback | None = None,
        fraction: float = 1 / 3,
        owner: Any = None,
        guard: asyncio.Task[Any] | None = None,
    ) -> None:
        super().__init__(handle, on_lost=on_lost, fraction=fraction, owner=owner)
        self.guard = guard
        self.lost = asyncio.Event()
        self.cancelled_guard = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> AsyncRenewer:
        self._task = asyncio.create_task(self._run(), name=f"redlease-renew-{self.handle.name}")
        return self

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> AsyncRenewer:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        loop = self.loop
        while True:
            await asyncio.sleep(loop.next_wait())
            budget, error = loop.begin(), None
            if budget is not None:
                try:
                    await self.handle.extend(owner=self.owner, timeout=budget)
                except Exception as exc:  # noqa: BLE001 - the one rule decides (classify)
                    error = exc
            why = loop.end(budget, error)
            if why is not None:
                loop.lose(why, self.on_lost)
                self.lost.set()
                if self.guard is not None and not self.guard.done():
                    self.cancelled_guard = True
                    self.guard.cancel(f"redlease: lease on {self.handle.name!r} lost")
                return
