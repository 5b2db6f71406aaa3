"""The sidecar's HTTP endpoints (aiohttp), as docs/sidecar.md specifies them.

``/status`` (the status document; ``?wait=SECONDS&since=VERSION`` long-polls:
:func:`long_poll`), ``/`` (``{"name": holder}``, like the classic k8s leader-elector, plus
``conflict`` when another process holds the lock under this sidecar's identity),
``/healthz``, ``/readyz``, ``/metrics`` and ``POST /drained`` (the app finished its work during
a drain: 200, else 409). Every handler first applies the renew deadline, so no answer claims
leadership after it. ``--probes`` (only ``/healthz`` and ``/readyz``, with their status codes
and no detail, for the kubelet's httpGet probes of the pod IP) is served by a process of its
own: :mod:`.probes`.

A long-poll waits on the sidecar's publication of a new version (:mod:`.changes`), never on a
timer or Redis; it is parked with the port's guard (:meth:`~redlease.serving.httpguard.
ConnectionGuard.park`): at most half the connection cap waits at once, the rest get 503 with
``Retry-After``, and a waiter whose client went away stops waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from aiohttp import web

from redlease.core.durations import parse_duration
from redlease.serving.httpguard import GuardedServer, guard_of
from redlease.serving.httpguard import serve as guarded
from redlease.sidecar.changes import MAX_WAIT
from redlease.sidecar.metrics import CONTENT_TYPE

VERSION_SHAPE = re.compile(r"[A-Za-z0-9._-]{1,64}")


class BadParameter(ValueError):
    """A query parameter that is not understood; ``name`` says which."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name}: {why}")
        self.name = name


def long_poll(query: Mapping[str, str]) -> tuple[float, str | None] | None:
    """``(wait, since)`` of ``/status?wait=DURATION&since=VERSION`` (pure): ``wait`` (seconds or
    ``3s``, ``500ms``: :func:`~redlease.core.durations.parse_duration`) capped at
    :data:`~redlease.sidecar.changes.MAX_WAIT`; ``since`` ``None`` means "the version now" (wait
    for the next change). ``None``: no ``wait``, answer at once."""
    since = query.get("since")
    if since is not None and not VERSION_SHAPE.fullmatch(since):
        raise BadParameter("since", "not a version of /status (1-64 of A-Z a-z 0-9 . _ -)")
    raw = query.get("wait")
    if raw is None:
        return None
    try:
        wait = parse_duration(raw)  # the one grammar of every duration: 30, 0.5, 3s, 500ms
    except ValueError:
        raise BadParameter(
            "wait", f"a duration >= 0 such as 30, 0.5, 3s or 500ms (at most {MAX_WAIT:g}s used)"
        ) from None
    return min(wait, MAX_WAIT), since


class Source(Protocol):
    """What the endpoints read from (the running sidecar)."""

    def ready(self) -> tuple[bool, bool]: ...

    def status(self) -> dict[str, Any]: ...

    async def wait_change(self, since: str, timeout: float) -> None:
        """Return once the status version differs from ``since``, or after ``timeout``."""

    def health(self) -> dict[str, Any]: ...

    def drained(self) -> bool:
        """The app says its work is done; False when no drain is under way."""

    def metrics(self) -> bytes: ...


Routes = Callable[[web.Application], None]  # adds more endpoints (the lock API: lockapi.py)
MAX_REQUEST = 64 * 1024  # bytes of a request body on these ports (the lock API's are < 4 KiB)


@web.middleware
async def json_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every answer is JSON: aiohttp's own refusals (the router's 404 and 405, a 413) become
    ``{"error": reason}`` with their status and headers (``Allow`` of a 405)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return web.json_response({"error": exc.reason}, status=exc.status, headers=headers)


def make_app(
    source: Source, *, metrics_only: bool = False, more: Routes | None = None
) -> web.Application:
    """The endpoints; ``metrics_only``: just ``/metrics`` (``--metrics``, for a scraper on the
    pod network, while ``/status`` and the probes stay on the loopback ``--http``)."""
    app = web.Application(middlewares=[json_errors], client_max_size=MAX_REQUEST)
    _routes(app, source, metrics_only=metrics_only, more=more)
    return app


def _routes(
    app: web.Application, source: Source, *, metrics_only: bool, more: Routes | None
) -> None:
    """The routes of :func:`make_app`."""

    async def status(request: web.Request) -> web.StreamResponse:
        try:
            poll = long_poll(request.query)
        except BadParameter as exc:
            return web.json_response({"error": str(exc), "parameter": exc.name}, status=400)
        doc = source.status()
        if poll is None or poll[0] == 0 or (poll[1] is not None and poll[1] != doc["version"]):
            return web.json_response(doc)
        return await waited(request, poll[0], doc["version"])

    async def waited(request: web.Request, wait: float, since: str) -> web.StreamResponse:
        """Park, wait for a new version (or the timeout, or the client or server going away),
        then write the answer before leaving the park (a closing server waits for it)."""
        guard = guard_of(request)
        gone = guard.park(request.transport) if guard is not None else asyncio.Event()
        if gone is None:
            waiting = guard.parked if guard is not None else 0
            body = {"error": f"too many waiting requests ({waiting}): retry, or omit wait"}
            return web.json_response(body, status=503, headers={"Retry-After": "1"})
        try:
            change = asyncio.ensure_future(source.wait_change(since, wait))
            stop = asyncio.ensure_future(gone.wait())
            try:
                await asyncio.wait({change, stop}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                change.cancel()
                stop.cancel()
            resp = web.json_response(source.status())
            with contextlib.suppress(ConnectionError):
                await resp.prepare(request)
                await resp.write_eof()
            return resp
        finally:
            if guard is not None:
                guard.unpark(gone)

    async def root(_: web.Request) -> web.Response:
        doc = source.status()
        conflict = doc.get("conflict")  # the name stays "": an app may compare it to its own
        return web.json_response(
            {"name": doc["holder"] or ""} | ({"conflict": conflict} if conflict else {})
        )

    async def healthz(_: web.Request) -> web.Response:
        doc = source.health()
        return web.json_response(doc, status=200 if doc["ok"] else 500)

    async def readyz(_: web.Request) -> web.Response:
        ok, leader = source.ready()
        return web.json_response({"ready": ok, "leader": leader}, status=200 if ok else 503)

    async def drained(_: web.Request) -> web.Response:
        if source.drained():
            return web.json_response({"drained": True})
        return web.json_response({"error": "not draining"}, status=409)

    async def metrics(_: web.Request) -> web.Response:
        body = source.metrics()
        content_type, _sep, charset = CONTENT_TYPE.partition("; charset=")
        return web.Response(body=body, content_type=content_type, charset=charset or None)

    app.router.add_get("/metrics", metrics)
    if metrics_only:
        return
    app.router.add_get("/status", status)
    app.router.add_get("/", root)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_post("/drained", drained)
    if more is not None:
        more(app)


def api_routes(
    lockapi: Any | None, dapr: Any | None = None, token: str | None = None
) -> Routes | None:
    """The routes beyond the status endpoints: the lock API (``lockapi``'s
    :meth:`~redlease.sidecar.lockapi.LockApi.add_routes`), Dapr's lock API (``dapr``'s
    :meth:`~redlease.sidecar.dapr.DaprApi.add_routes`) and, with a ``token``, the API token
    check (:func:`redlease.sidecar.apiauth.middleware`) in front of every route but the probes
    and views. None when there is nothing to add."""
    if lockapi is None and dapr is None and token is None:
        return None

    def add(app: web.Application) -> None:
        if token is not None:
            from redlease.sidecar.apiauth import middleware

            app.middlewares.append(middleware(token))
        for routes in (lockapi, dapr):
            if routes is not None:
                routes.add_routes(app)

    return add


PORTS = 2  # --http and --metrics: each gets half of the descriptor budget


async def serve(
    source: Source, host: str, port: int, *, metrics_only: bool = False, more: Routes | None = None
) -> GuardedServer:
    """Start serving behind :func:`redlease.serving.httpguard.serve`; an ``OSError`` if the address
    cannot be bound."""
    app = make_app(source, metrics_only=metrics_only, more=more)
    return await guarded(app, host, port, share=PORTS)
