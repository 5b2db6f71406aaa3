"""The blocking API: Lock, Semaphore, ReentrantLock, ReadWriteLock, MultiLock and Renewer.

Works unchanged with ``redis.Redis``, ``redis.cluster.RedisCluster`` and a blocking
:class:`redlease.quorum.NodeSet`. All logic lives in :mod:`redlease.core.flows`,
:mod:`redlease.core.handles` and :mod:`redlease.core.multi`; this module only runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from redlease.core import _log as log
from redlease.core import _sync
from redlease.core.handlekinds import ReadWritePair, SemaphoreCore
from redlease.core.handles import HandleCore
from redlease.core.lease import Lease, RenewerBase
from redlease.core.multi import MultiCore
from redlease.core.state import LockState
from redlease.errors import LeaseLost, NotOwned

LostCallback = Callable[[LeaseLost], None]


class _SyncHandle(HandleCore):
    """Blocking operations over one Redis client (or a cluster, or a RedLock node set)."""

    plain = _sync.SyncNode

    @property
    def node(self) -> str:
        """A secret-free name of the Redis node(s) behind this lock."""
        return self._node.name

    def acquire(
        self, blocking: bool = True, timeout: float | None = None, *, owner: Any = None
    ) -> Lease:
        """Acquire the lock; wait (woken by notification) up to ``timeout`` seconds if blocking.

        Raises :class:`LockTimeout`/:class:`LockContention` on contention and
        :class:`LockUnavailable` on an outage. A failed or interrupted acquire leaves no lease.
        """
        flow, cleanup, token = self._begin_acquire(
            owner, blocking, timeout, self._node.socket_timeout
        )
        grant = _sync.guarded(self._node, flow, cleanup, self.budget(timeout), self.cleanup_budget)
        return self._finish_acquire(owner, token, grant)

    def release(self, *, owner: Any = None) -> None:
        """Release (one level of) the hold. Raises :class:`NotOwned` if the lease was lost."""
        flow, held = self._begin_release(owner)
        try:
            _sync.drive(self._node, flow, budget=self.budget(held=held))
        except NotOwned:
            self._forget(owner, held)
            raise
        self._finish_release(owner, held)

    def extend(
        self, ttl: float | None = None, *, owner: Any = None, timeout: float | None = None
    ) -> Lease:
        """Push the expiry to ``ttl`` (default: the lock's TTL) from now; owner only.

        ``timeout`` bounds the wait for Redis (default: the client's socket timeout).
        """
        flow, held = self._begin_extend(owner, ttl, timeout)
        try:
            result = _sync.drive(self._node, flow, budget=self.budget(timeout, held))
        except NotOwned:
            self._forget(owner, held)
            raise
        return self._finish_extend(held, result, ttl)

    def state(self) -> LockState:
        """Read the lock's live state from Redis (holder, fencing token, TTL left, ...)."""
        return _sync.drive(self._node, self._state_flow(), budget=self.budget())  # type: ignore[no-any-return]

    def locked(self) -> bool:
        """Whether anyone holds the lock now (one read of its state in Redis), as
        ``threading.Lock.locked()``; :meth:`owned` says whether this handle holds it."""
        return self.state().held

    def __enter__(self) -> Lease:
        """``with lock:`` acquires (waiting as long as it takes), keeps the lease renewed from
        a background thread while the block runs (a :class:`Renewer`, as Redisson's watchdog),
        and releases it at the end. If renewal fails the lease is marked lost (``lease.valid``
        turns false, a warning is logged) and the exit raises :class:`NotOwned`; use
        :meth:`hold` for a timeout or an ``on_lost`` callback."""
        lease = self.acquire()
        key = self._owner_key(None)
        running = self._watchdogs.get(key)
        if running is None or running.lost.is_set():
            self._watchdogs[key] = Renewer(self).start()
        return lease

    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.count() <= 1:
            renewer = self._watchdogs.pop(self._owner_key(None), None)
            if renewer is not None:
                renewer.stop()
        self.release()

    @contextmanager
    def hold(
        self,
        timeout: float | None = None,
        *,
        renew: bool = True,
        on_lost: LostCallback | None = None,
        fraction: float = 1 / 3,
        owner: Any = None,
    ) -> Iterator[Lease]:
        """Acquire, keep renewing in a background thread, release on exit.

        Check ``lease.valid`` before acting on the protected resource: it turns false at the
        local deadline even while Redis is unreachable. ``on_lost`` is called once on loss.
        """
        lease = self.acquire(timeout=timeout, owner=owner)
        renewer = Renewer(self, on_lost=on_lost, fraction=fraction, owner=owner) if renew else None
        try:
            if renewer:
                renewer.start()
            yield lease
        finally:
            if renewer:
                renewer.stop()
            try:
                self.release(owner=owner)
            except NotOwned:
                log.warning("lease already lost at release", lock=self.name)


class Semaphore(SemaphoreCore, _SyncHandle):
    """A counting semaphore: at most ``limit`` holders at once, each with its own lease,
    renewal and fencing token (above every token issued before for ``name``); fair, notified
    waiting. One hold per instance (a process wanting two permits uses two handles).

    ``Semaphore(client, "jobs", limit=3, ttl=15)`` has the surface of :class:`Lock`
    (``acquire``, ``extend``, ``release``, ``hold``, ``state``, :class:`Renewer`); :class:`Lock`
    is its ``limit`` 1 case, the same code. See docs/semaphore.md.
    """


class Lock(_SyncHandle):
    """A mutex lease with fencing tokens. One hold per instance (not reentrant)."""


class MultiLock(MultiCore, _SyncHandle):
    """One mutex lease over several lock names, held all or nothing with one fencing token.

    ``MultiLock(client, ["a", "b"], ttl=15)`` has the surface of :class:`Lock` (``acquire``,
    ``extend``, ``release``, ``state``, ``hold``, :class:`Renewer`). The token is above every
    token issued before for any of the names, single-name leases included. On one Redis node
    each operation is one script; on a Redis Cluster or a RedLock node set the names are taken
    in sorted order and given back on any refusal or failure. With one name it is a
    :class:`Lock`. ``state()`` names a holder only when it holds every name; ``states()`` gives
    each name's state.
    """

    def states(self) -> dict[str, LockState]:
        """The live state of each lock name."""
        return _sync.drive(self._node, self._states_flow(), budget=self.budget())  # type: ignore[no-any-return]


class ReentrantLock(_SyncHandle):
    """A lease that the same owner may take repeatedly; released when the count reaches zero.

    The owner is explicit (``owner=``) and defaults to the current thread.
    """

    kind = "reentrant"

    def _owner_key(self, owner: Any) -> Any:
        return threading.current_thread() if owner is None else owner


class ReadLock(_SyncHandle):
    """The shared side of a :class:`ReadWriteLock`. One hold per instance."""

    kind = "read"
    public = "ReadWriteLock"


class WriteLock(_SyncHandle):
    """The exclusive side of a :class:`ReadWriteLock`. One hold per instance."""

    kind = "write"
    public = "ReadWriteLock"


class ReadWriteLock(ReadWritePair[ReadLock, WriteLock]):
    """Many readers or one writer on one cluster slot; a waiting writer blocks new readers.

    ``reader()`` and ``writer()`` return fresh handles (each holds at most once).
    """

    reader_class = ReadLock
    writer_class = WriteLock


class Renewer(RenewerBase):
    """Extends a held lease at ``fraction`` of its TTL from a daemon thread.

    Keeps the lease's local deadline current; when an extend is refused, or the deadline passes
    without a successful extend (Redis unreachable, process paused), the lease is marked lost,
    a log line is written, ``lost`` is set and ``on_lost`` is called once. No extend waits past
    the local deadline.
    """

    def __init__(
        self,
        handle: _SyncHandle,
        *,
        on_lost: LostCallback | None = None,
        fraction: float = 1 / 3,
        owner: Any = None,
    ) -> None:
        super().__init__(handle, on_lost=on_lost, fraction=fraction, owner=owner)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"redlease-renew-{handle.name}", daemon=True
        )

    def start(self) -> Renewer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Renewer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = self.loop
        while not self._stop.wait(loop.next_wait()):
            budget, error = loop.begin(), None
            if budget is not None:
                try:
                    self.handle.extend(owner=self.owner, timeout=budget)
                except Exception as exc:  # noqa: BLE001 - the one rule decides (classify)
                    error = exc
            why = loop.end(budget, error)
            if why is not None:
                loop.lose(why, self.on_lost)
                self.lost.set()
                return
