"""The operator's listening ports: ``--metrics``, ``--liveness`` and the injection webhook, each
an aiohttp application behind :mod:`redlease.serving.httpguard` (header/idle timeout, a connection
cap that keeps descriptors for the API and Redis, throttled accept errors).

kopf builds its liveness and webhook servers on a plain ``aiohttp.web.TCPSite`` (no cap, no
header timeout), so the operator serves liveness itself (a startup handler of the kopf that
serves the webhook: it answers only while that kopf runs) and gives kopf a webhook server class
whose serving loop is ours. A renewed certificate is loaded into a new TLS context that new
handshakes pick up; a failed read of the files (rotation in progress, no descriptors) keeps the
current certificate and is retried, instead of stopping the operator.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import kopf
from aiohttp import web

from redlease.serving import httpguard
from redlease.serving.throttle import Throttle

log = logging.getLogger("redlease.operator")
PORTS = 3  # metrics, liveness, webhook: each gets a third of the descriptor budget


async def serve(
    app: web.Application, host: str, port: int, **kwargs: Any
) -> httpguard.GuardedServer:
    """``app`` on ``host:port`` behind a guard with this process's share of descriptors."""
    return await httpguard.serve(app, host, port, share=PORTS, **kwargs)


async def serve_metrics(host: str, port: int, text: Callable[[], str]) -> httpguard.GuardedServer:
    """``GET /metrics`` (``text()`` builds the body)."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=text(), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return await serve(app, host, port)


def liveness(
    registry: kopf.OperatorRegistry, endpoint: str, health: Callable[[], dict[str, Any]]
) -> None:
    """Serve ``endpoint`` (``http://HOST:PORT/PATH``) from the kopf that runs ``registry``:
    200 and ``{"refresh": health()}`` (kopf's shape), 500 if ``health()`` raises."""
    parts = urlsplit(endpoint)
    host, port, path = parts.hostname or "localhost", parts.port or 80, parts.path or "/"
    served: list[httpguard.GuardedServer] = []

    async def healthz(_: web.Request) -> web.Response:
        try:
            return web.json_response({"refresh": health()})
        except Exception as exc:  # noqa: BLE001 - the probe's answer, not a crash
            return web.json_response({"error": str(exc) or type(exc).__name__}, status=500)

    @kopf.on.startup(registry=registry, id="liveness")
    async def start(**_: Any) -> None:
        app = web.Application()
        app.router.add_get(path, healthz)
        try:
            served.append(await serve(app, host, port))
        except OSError as exc:
            raise kopf.PermanentError(f"--liveness {endpoint}: {exc}") from None
        log.debug("serving liveness at http://%s:%d%s", host, port, path)

    @kopf.on.cleanup(registry=registry, id="liveness-stop")
    async def stop(**_: Any) -> None:
        while served:
            await served.pop().close()


class WebhookServer(kopf.WebhookServer):
    """kopf's webhook server (its TLS set-up, request handling and client config) served behind
    a guard; a renewed certificate is picked up without closing the port."""

    async def __call__(self, fn: Any) -> AsyncIterator[kopf.WebhookClientConfig]:
        async def review(request: web.Request) -> web.Response:
            return await self._serve(fn, request)

        cadata, context = self._build_ssl()
        current = [context]
        if context is not None:
            context.sni_callback = _use(current)  # every handshake takes the newest context
        app = web.Application()
        app.router.add_post(f"{(self.path or '').rstrip('/')}/{{id:.*}}", review)
        addr = self.addr or "0.0.0.0"  # noqa: S104 - kopf's "any interface"
        server = await serve(app, addr, self.port or 0, ssl_context=context)
        try:
            schema = "http" if context is None else "https"
            host = self.host or self.DEFAULT_HOST or self._get_accessible_addr(self.addr)
            client = kopf.WebhookClientConfig(
                url=self._build_url(schema, host, server.port, self.path or "")
            )
            if cadata is not None:
                client["caBundle"] = base64.b64encode(cadata).decode("ascii")
            yield client
            await self._follow_certificate(current)
        finally:
            await server.close()

    def _digest(self) -> str:
        hasher = hashlib.sha256()
        for path in (self.certfile, self.pkeyfile, self.cafile):
            if path is not None:
                with open(str(path), "rb") as f:
                    hasher.update(f.read())
        return hasher.hexdigest()

    async def _follow_certificate(self, current: list[ssl.SSLContext | None]) -> None:
        """Every ``file_check_interval``: if the files changed, a new context for new
        handshakes; a failure keeps the current one (one warning per minute)."""
        throttle = Throttle(60.0)
        loaded: str | None = None
        while True:
            try:
                digest = self._digest()
                if loaded is None:
                    loaded = digest
                elif digest != loaded and current[0] is not None:
                    _, context = self._build_ssl()
                    assert context is not None
                    context.sni_callback = _use(current)
                    current[0], loaded = context, digest
                    log.info("webhook: loaded the renewed certificate")
            except (OSError, ssl.SSLError, ValueError) as exc:
                skipped = throttle.allow("certificate", time.monotonic())
                if skipped is not None:
                    log.warning(
                        "webhook: cannot read the certificate, keeping the current one: %s%s",
                        exc,
                        f" (and {skipped} more like it)" if skipped else "",
                    )
            await asyncio.sleep(self.file_check_interval)


def _use(current: list[ssl.SSLContext | None]) -> Callable[[Any, str | None, Any], None]:
    def pick(conn: Any, _name: str | None, _ctx: Any) -> None:
        if current[0] is not None and conn.context is not current[0]:
            conn.context = current[0]

    return pick
