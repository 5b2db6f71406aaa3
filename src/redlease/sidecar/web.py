"""The sidecar's HTTP endpoints (aiohttp), as DESIGN.md specifies them.

``/status`` (the status document), ``/`` (``{"name": holder}``, like the classic k8s
leader-elector), ``/healthz``, ``/readyz`` and ``/metrics``. Every handler first applies the renew
deadline, so no answer claims leadership after it.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from redlease.sidecar.metrics import CONTENT_TYPE


class Source(Protocol):
    """What the endpoints read from (the running sidecar)."""

    def ready(self) -> tuple[bool, bool]: ...

    def status(self) -> dict[str, Any]: ...

    def healthy(self) -> bool: ...

    def metrics(self) -> bytes: ...


def make_app(source: Source) -> web.Application:
    async def status(_: web.Request) -> web.Response:
        return web.json_response(source.status())

    async def root(_: web.Request) -> web.Response:
        return web.json_response({"name": source.status()["holder"] or ""})

    async def healthz(_: web.Request) -> web.Response:
        ok = source.healthy()
        return web.json_response({"ok": ok}, status=200 if ok else 500)

    async def readyz(_: web.Request) -> web.Response:
        ok, leader = source.ready()
        return web.json_response({"ready": ok, "leader": leader}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        body = source.metrics()
        content_type, _sep, charset = CONTENT_TYPE.partition("; charset=")
        return web.Response(body=body, content_type=content_type, charset=charset or None)

    app = web.Application()
    app.router.add_get("/status", status)
    app.router.add_get("/", root)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
