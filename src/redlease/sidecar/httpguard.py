"""Keep the sidecar's HTTP port alive under hostile or broken clients.

aiohttp has no header timeout: a client that sends half a request holds its connection (and a
file descriptor) for ever, and enough of them starve the process of descriptors (no probe
answers, no state-file writes). :class:`ConnectionGuard` wraps aiohttp's protocol factory and

* closes a connection that has not had a complete request for ``timeout`` seconds (since it was
  opened, or since its last answer: a header and an idle timeout in one rule);
* caps live connections below the descriptor limit; at the cap, a new connection evicts the
  oldest idle one, so a kubelet probe still gets through while an attacker fills the cap;
* :class:`RateLimit` bounds repeated log lines (accept errors) to one per interval.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from redlease.sidecar.throttle import Throttle

FD_RESERVE = 64  # descriptors kept for Redis, the Kubernetes API, state-file writes, logging
BACKLOG = 16  # asyncio accepts up to this many sockets before any of them reaches the guard


def connection_cap(wanted: int) -> int:
    """``wanted``, but low enough that live connections, a burst of not yet admitted accepts
    (:data:`BACKLOG`) and :data:`FD_RESERVE` stay within the soft descriptor limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft - FD_RESERVE - BACKLOG))


class _Conn:
    __slots__ = ("busy", "since", "timer", "transport")

    def __init__(self, transport: asyncio.Transport, since: float) -> None:
        self.transport = transport
        self.since = since
        self.busy = 0
        self.timer: asyncio.TimerHandle | None = None


class ConnectionGuard:
    """The timeout and the cap (see module doc): :meth:`wrap` aiohttp's protocol factory and
    install :meth:`middleware` in the application."""

    def __init__(self, *, cap: int, timeout: float) -> None:
        self.cap = cap
        self.timeout = timeout
        self.conns: dict[asyncio.Transport, _Conn] = {}  # insertion order: oldest first
        self.evicted = 0
        self.timed_out = 0

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` around ``factory``."""
        return lambda: _Guarded(self, factory())

    # -- bookkeeping ----------------------------------------------------------------------

    def admit(self, transport: asyncio.Transport) -> None:
        if len(self.conns) >= self.cap:
            idle = next((c for c in self.conns.values() if not c.busy), None)
            if idle is None:
                transport.abort()  # every slot is answering a request right now
                return
            self.evicted += 1
            self._close(idle)
        conn = _Conn(transport, time.monotonic())
        self.conns[transport] = conn
        self._arm(conn)

    def forget(self, transport: asyncio.Transport) -> None:
        conn = self.conns.pop(transport, None)
        if conn is not None and conn.timer is not None:
            conn.timer.cancel()

    def started(self, transport: Any) -> None:
        conn = self.conns.get(transport)
        if conn is not None:
            conn.busy += 1

    def finished(self, transport: Any) -> None:
        conn = self.conns.get(transport)
        if conn is not None:
            conn.busy -= 1
            conn.since = time.monotonic()
            self._arm(conn)

    def _arm(self, conn: _Conn) -> None:
        if conn.timer is not None:
            conn.timer.cancel()
        loop = asyncio.get_running_loop()
        conn.timer = loop.call_at(loop.time() + self.timeout + 0.01, self._expire, conn.transport)

    def _expire(self, transport: asyncio.Transport) -> None:
        conn = self.conns.get(transport)
        if conn is None or conn.busy:
            return
        if time.monotonic() - conn.since >= self.timeout:
            self.timed_out += 1
            self._close(conn)
        else:
            self._arm(conn)

    def _close(self, conn: _Conn) -> None:
        self.forget(conn.transport)
        conn.transport.abort()

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Marks the connection busy while a complete request is being answered."""
        transport = request.transport
        self.started(transport)
        try:
            return await handler(request)
        finally:
            self.finished(transport)


class _Guarded(asyncio.Protocol):
    """Delegates to aiohttp's protocol; tells the guard when a connection comes and goes."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.guard.admit(transport)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.guard.forget(self.transport)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class RateLimit(logging.Filter):
    """Lets the same message through at most once per ``interval`` seconds (a
    :class:`~redlease.sidecar.throttle.Throttle`); the next one that passes says how many were
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
