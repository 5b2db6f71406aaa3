"""The sidecar's HTTP endpoints (aiohttp), as docs/sidecar.md specifies them.

``/status`` (the status document), ``/`` (``{"name": holder}``, like the classic k8s
leader-elector), ``/healthz``, ``/readyz`` and ``/metrics``. Every handler first applies the renew
deadline, so no answer claims leadership after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from aiohttp import web

from redlease.sidecar.httpguard import BACKLOG, ConnectionGuard, RateLimit, connection_cap
from redlease.sidecar.metrics import CONTENT_TYPE

MAX_CONNECTIONS = 256  # far more than probes and scrapers need; lowered below the fd limit
REQUEST_TIMEOUT = 5.0  # a connection gets this long for each complete request (header + idle)


class Source(Protocol):
    """What the endpoints read from (the running sidecar)."""

    def ready(self) -> tuple[bool, bool]: ...

    def status(self) -> dict[str, Any]: ...

    def health(self) -> dict[str, Any]: ...

    def metrics(self) -> bytes: ...


def make_app(
    source: Source, middlewares: Sequence[Any] = (), *, metrics_only: bool = False
) -> web.Application:
    """The endpoints; ``metrics_only``: just ``/metrics`` (``--metrics``, for a scraper on the
    pod network, while ``/status`` and the probes stay on the loopback ``--http``)."""

    async def status(_: web.Request) -> web.Response:
        return web.json_response(source.status())

    async def root(_: web.Request) -> web.Response:
        return web.json_response({"name": source.status()["holder"] or ""})

    async def healthz(_: web.Request) -> web.Response:
        doc = source.health()
        return web.json_response(doc, status=200 if doc["ok"] else 500)

    async def readyz(_: web.Request) -> web.Response:
        ok, leader = source.ready()
        return web.json_response({"ready": ok, "leader": leader}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        body = source.metrics()
        content_type, _sep, charset = CONTENT_TYPE.partition("; charset=")
        return web.Response(body=body, content_type=content_type, charset=charset or None)

    app = web.Application(middlewares=list(middlewares))
    app.router.add_get("/metrics", metrics)
    if metrics_only:
        return app
    app.router.add_get("/status", status)
    app.router.add_get("/", root)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class HttpServer:
    """The endpoints on ``host:port`` behind a :class:`ConnectionGuard`."""

    def __init__(self, runner: web.AppRunner, server: asyncio.Server, guard: ConnectionGuard):
        self.runner = runner
        self.server = server
        self.guard = guard

    async def close(self) -> None:
        self.server.close()
        for transport in list(self.guard.conns):
            transport.abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self.server.wait_closed()
        await self.runner.cleanup()


async def serve(source: Source, host: str, port: int, *, metrics_only: bool = False) -> HttpServer:
    """Start serving; an ``OSError`` if the address cannot be bound."""
    # asyncio logs every failed accept (EMFILE) once per second per server: keep one a while
    logging.getLogger("asyncio").addFilter(RateLimit())
    guard = ConnectionGuard(cap=connection_cap(MAX_CONNECTIONS), timeout=REQUEST_TIMEOUT)
    runner = web.AppRunner(
        make_app(source, [guard.middleware], metrics_only=metrics_only),
        access_log=None,
        handle_signals=False,
        keepalive_timeout=REQUEST_TIMEOUT,
    )
    await runner.setup()
    assert runner.server is not None
    try:
        server = await asyncio.get_running_loop().create_server(
            guard.wrap(runner.server), host, port, reuse_address=True, backlog=BACKLOG
        )
    except OSError:
        await runner.cleanup()
        raise
    return HttpServer(runner, server, guard)
