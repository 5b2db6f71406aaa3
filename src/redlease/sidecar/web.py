"""The sidecar's HTTP endpoints (aiohttp), as docs/sidecar.md specifies them.

``/status`` (the status document), ``/`` (``{"name": holder}``, like the classic k8s
leader-elector), ``/healthz``, ``/readyz`` and ``/metrics``. Every handler first applies the renew
deadline, so no answer claims leadership after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from redlease.kube.httpguard import GuardedServer
from redlease.kube.httpguard import serve as guarded
from redlease.sidecar.metrics import CONTENT_TYPE


class Source(Protocol):
    """What the endpoints read from (the running sidecar)."""

    def ready(self) -> tuple[bool, bool]: ...

    def status(self) -> dict[str, Any]: ...

    def health(self) -> dict[str, Any]: ...

    def metrics(self) -> bytes: ...


Routes = Callable[[web.Application], None]  # adds more endpoints (the lock API: lockapi.py)


def make_app(
    source: Source, *, metrics_only: bool = False, more: Routes | None = None
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

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    if metrics_only:
        return app
    app.router.add_get("/status", status)
    app.router.add_get("/", root)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if more is not None:
        more(app)
    return app


PORTS = 2  # --http and --metrics: each gets half of the descriptor budget


async def serve(
    source: Source, host: str, port: int, *, metrics_only: bool = False, more: Routes | None = None
) -> GuardedServer:
    """Start serving behind :func:`redlease.kube.httpguard.serve`; an ``OSError`` if the address
    cannot be bound."""
    app = make_app(source, metrics_only=metrics_only, more=more)
    return await guarded(app, host, port, share=PORTS)
