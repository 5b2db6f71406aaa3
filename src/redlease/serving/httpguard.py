"""Keep a listening HTTP port alive under hostile or broken clients: every port the sidecar and
the operator serve (probes, ``/metrics``, ``/status``, the injection webhook) goes through here.

aiohttp has no header timeout: a client that sends half a request holds its connection (and a
file descriptor) for ever, and enough of them starve the process of descriptors (no probe
answers, no state-file writes). :class:`ConnectionGuard` wraps aiohttp's protocol factory and

* closes a connection that has not had a complete request for ``timeout`` seconds (since it was
  opened, or since its last answer: a header and an idle timeout in one rule);
* reads a request's body before its handler runs, within ``timeout`` seconds of its headers: a
  body that does not arrive in time is answered 408 and its connection closed; while its body
  arrives a connection is not busy, so at the cap it may be evicted like an idle one;
* caps live connections below the descriptor limit; at the cap, a new connection evicts the
  oldest idle one, so a kubelet probe still gets through while an attacker fills the cap. The
  numbers (the cap, the descriptors a port holds while a flood is accepted, the timeouts) are
  :mod:`redlease.serving.portlimits`';
* a :class:`~redlease.serving.throttle.RateLimit` bounds repeated accept errors' log lines;
* :func:`serve` lengthens the kernel's listen queue, which costs no descriptors;
* a request that waits long on purpose (a long-poll) is parked (:meth:`~ConnectionGuard.park`):
  a busy connection is never evicted nor timed out, so at most half the cap may be parked
  (:attr:`~ConnectionGuard.park_cap`; the rest of the cap stays for probes and short requests);
  a kind of parked request may be given a smaller share of it (``limit``: the lock API's
  blocking acquires take at most three quarters, so that long-polls keep room);
  a parked request learns when its connection goes away or the server closes, and stops waiting;
* :func:`serve` rate-limits aiohttp's error lines (one malformed request after another) like the
  accept errors.

:func:`serve` puts an aiohttp application behind a guard on ``host:port`` (TLS if given).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from asyncio.sslproto import SSLProtocol
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web

from redlease.serving.portlimits import (
    BACKLOG,
    LISTEN_QUEUE,
    MAX_CONNECTIONS,
    REQUEST_TIMEOUT,
    connection_cap,
    park_cap,
)
from redlease.serving.throttle import RateLimit


class _Conn:
    __slots__ = ("busy", "gone", "kind", "reading", "since", "timer", "transport")

    def __init__(self, transport: asyncio.Transport, since: float) -> None:
        self.transport = transport
        self.since = since
        self.busy = 0
        self.reading = False  # its request's body is arriving: not busy, its own deadline
        self.timer: asyncio.TimerHandle | None = None
        self.gone: asyncio.Event | None = None  # while parked: set when the waiting must end
        self.kind = ""  # while parked: which share it counts against


class ConnectionGuard:
    """The timeout and the cap (see module doc): :meth:`wrap` aiohttp's protocol factory and
    install :meth:`middleware` in the application."""

    def __init__(self, *, cap: int, timeout: float, body_timeout: float | None = None) -> None:
        self.cap = cap
        self.timeout = timeout
        self.body_timeout = timeout if body_timeout is None else body_timeout
        self.conns: dict[object, _Conn] = {}  # by socket; insertion order: oldest first
        self.evicted = 0
        self.timed_out = 0
        self.slow_bodies = 0  # requests answered 408: their body did not arrive in time
        self.parked = 0
        self.parked_by: Counter[str] = Counter()  # parked requests by kind
        self.refused_parks = 0
        self._none_parked: asyncio.Event | None = None  # while closing with parked requests

    @property
    def park_cap(self) -> int:
        """How many requests may wait long at once: half the cap (:func:`park_cap`)."""
        return park_cap(self.cap)

    def park(
        self, transport: Any, *, kind: str = "", limit: int | None = None
    ) -> asyncio.Event | None:
        """A request on ``transport`` is about to wait long (a long-poll, a blocking acquire).
        ``None``: refused (:attr:`park_cap` requests already wait, or ``limit`` of its
        ``kind``, or the connection is gone); else an event set when its connection goes away
        or the server closes: stop waiting then. Pair with :meth:`unpark`."""
        conn = self.conns.get(_key(transport)) if transport is not None else None
        full = self.parked >= self.park_cap or (limit is not None and self.parked_by[kind] >= limit)
        if conn is None or conn.gone is not None or full:
            self.refused_parks += conn is not None
            return None
        self.parked += 1
        self.parked_by[kind] += 1
        conn.gone, conn.kind = asyncio.Event(), kind
        return conn.gone

    def unpark(self, gone: asyncio.Event, kind: str = "") -> None:
        """The parked request that got ``gone`` (parked as ``kind``) has answered (or failed)."""
        self.parked -= 1
        self.parked_by[kind] -= 1
        for conn in self.conns.values():
            if conn.gone is gone:
                conn.gone = None
        if self.parked == 0 and self._none_parked is not None:
            self._none_parked.set()

    def wrap(
        self, factory: Callable[[], asyncio.Protocol], ssl_context: ssl.SSLContext | None = None
    ) -> Callable[[], asyncio.BaseProtocol]:
        """A protocol factory for ``loop.create_server`` around ``factory``; with
        ``ssl_context`` the TLS layer sits inside the guard, so a connection that never
        finishes its handshake counts against the cap and times out like any other."""
        if ssl_context is None:
            return lambda: _Guarded(self, factory())

        def tls() -> asyncio.BaseProtocol:
            inner = SSLProtocol(
                asyncio.get_running_loop(), factory(), ssl_context, None,  # type: ignore[arg-type]
                server_side=True, ssl_handshake_timeout=self.timeout,  # type: ignore[arg-type]
            )  # fmt: skip
            return _GuardedBuffered(self, inner)

        return tls

    # -- bookkeeping ----------------------------------------------------------------------

    def admit(self, transport: asyncio.Transport) -> None:
        """A new TCP connection: take a slot (evicting the oldest idle one at the cap)."""
        if len(self.conns) >= self.cap:
            idle = next((c for c in self.conns.values() if not c.busy), None)
            if idle is None:
                transport.abort()  # every slot is answering a request right now
                return
            self.evicted += 1
            self._close(idle)
        conn = _Conn(transport, time.monotonic())
        self.conns[_key(transport)] = conn
        self._arm(conn)

    def forget(self, transport: asyncio.BaseTransport) -> None:
        conn = self.conns.pop(_key(transport), None)
        if conn is not None and conn.timer is not None:
            conn.timer.cancel()
        if conn is not None and conn.gone is not None:
            conn.gone.set()

    async def release_parked(self, timeout: float) -> None:
        """Closing: tell every parked request to answer now, and give them ``timeout`` seconds
        to have written their answers."""
        if self.parked == 0:
            return
        self._none_parked = asyncio.Event()
        for conn in self.conns.values():
            if conn.gone is not None:
                conn.gone.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._none_parked.wait()

    def started(self, transport: Any) -> None:
        conn = self.conns.get(_key(transport)) if transport is not None else None
        if conn is not None:
            conn.busy += 1

    def finished(self, transport: Any) -> None:
        conn = self.conns.get(_key(transport)) if transport is not None else None
        if conn is not None:
            conn.busy -= 1
            conn.since = time.monotonic()
            self._arm(conn)

    def _arm(self, conn: _Conn) -> None:
        if conn.timer is not None:
            conn.timer.cancel()
        loop = asyncio.get_running_loop()
        conn.timer = loop.call_at(loop.time() + self.timeout + 0.01, self._expire, conn)

    def _expire(self, conn: _Conn) -> None:
        if self.conns.get(_key(conn.transport)) is not conn or conn.busy:
            return
        if conn.reading:  # its body's own deadline answers it (408)
            self._arm(conn)
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
        """Reads the request's body (:meth:`read_body`), then marks the connection busy while
        the complete request is being answered."""
        transport = request.transport
        refused = await self.read_body(request)
        if refused is not None:
            return refused
        self.started(transport)
        try:
            return await handler(request)
        finally:
            self.finished(transport)

    async def read_body(self, request: web.Request) -> web.StreamResponse | None:
        """Read ``request``'s body into the request (``await request.read()`` returns it) within
        :attr:`body_timeout`; None when it arrived (or there is none), else the answer: 408
        (and the connection closed) when it did not arrive in time, 413 past the application's
        ``client_max_size``. Meanwhile the connection is not busy: at the cap it may be evicted,
        and its idle timer leaves it to this deadline."""
        if not request.body_exists:
            return None
        conn = self.conns.get(_key(request.transport)) if request.transport is not None else None
        if conn is not None:
            conn.reading = True
        try:
            async with asyncio.timeout(self.body_timeout):
                await request.read()
        except TimeoutError:
            self.slow_bodies += 1
            late = _error(408, f"the request body did not arrive within {self.body_timeout:g}s")
            late.force_close()
            return late
        except web.HTTPRequestEntityTooLarge:
            big = _error(413, "the body is over this port's limit", field="body")
            big.force_close()
            return big
        except (ConnectionError, web.HTTPException):  # the client went away (or sent garbage)
            gone = _error(400, "the request body was cut short", field="body")
            gone.force_close()
            return gone
        finally:
            if conn is not None:
                conn.reading = False
        return None


def _error(status: int, message: str, **fields: str) -> web.Response:
    """A JSON error answer (every answer of these ports is JSON)."""
    return web.json_response({"error": message, **fields}, status=status)


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


class _GuardedBuffered(_Guarded, asyncio.BufferedProtocol):
    """:class:`_Guarded` around a buffered protocol (asyncio's TLS layer): the loop calls
    ``get_buffer``/``buffer_updated`` instead of ``data_received``."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.BufferedProtocol) -> None:
        super().__init__(guard, cast(asyncio.Protocol, inner))  # data_received is never called
        self.buffered = inner

    def get_buffer(self, sizehint: int) -> Any:
        return self.buffered.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.buffered.buffer_updated(nbytes)


def _key(transport: asyncio.BaseTransport) -> object:
    """One connection's key, the same for its TCP transport and the TLS transport over it."""
    return transport.get_extra_info("socket") or transport


GUARD = web.AppKey("redlease-guard", ConnectionGuard)


def guard_of(request: web.Request) -> ConnectionGuard | None:
    """The guard in front of ``request``'s application (``None`` when served without one)."""
    return request.app.get(GUARD)


class GuardedServer:
    """An aiohttp application on ``host:port`` behind a :class:`ConnectionGuard`."""

    def __init__(self, runner: web.AppRunner, server: asyncio.Server, guard: ConnectionGuard):
        self.runner = runner
        self.server = server
        self.guard = guard

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.server.close()
        await self.guard.release_parked(1.0)
        for conn in list(self.guard.conns.values()):
            conn.transport.abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self.server.wait_closed()
        await self.runner.cleanup()


async def serve(
    app: web.Application,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    cap: int = MAX_CONNECTIONS,
    share: int = 1,
    timeout: float = REQUEST_TIMEOUT,
) -> GuardedServer:
    """Serve ``app`` on ``host:port`` with the header/idle timeout and the connection cap (see
    the module doc; ``share``: how many ports the process serves); an ``OSError`` if the
    address cannot be bound."""
    # asyncio logs every failed accept (EMFILE) once per second per server: keep one a while;
    # aiohttp logs every malformed request (one line each, a flood of them): the same
    logging.getLogger("asyncio").addFilter(_ACCEPT_ERRORS)
    logging.getLogger("aiohttp.server").addFilter(_REQUEST_ERRORS)
    guard = ConnectionGuard(cap=connection_cap(cap, share), timeout=timeout)
    app.middlewares.append(guard.middleware)
    app[GUARD] = guard
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=timeout)
    await runner.setup()
    assert runner.server is not None
    try:
        server = await asyncio.get_running_loop().create_server(
            guard.wrap(runner.server, ssl_context),
            host,
            port,
            reuse_address=True,
            backlog=BACKLOG,
        )
    except OSError:
        await runner.cleanup()
        raise
    for listening in server.sockets:
        # asyncio listens with BACKLOG (also how many it accepts at once); a longer kernel queue
        # keeps a probe's connection from being dropped while a flood is being evicted
        with socket.fromfd(listening.fileno(), listening.family, listening.type) as dup:
            dup.listen(LISTEN_QUEUE)
    return GuardedServer(runner, server, guard)


_ACCEPT_ERRORS = RateLimit()  # one filter for the process, however many servers it starts
_REQUEST_ERRORS = RateLimit()
