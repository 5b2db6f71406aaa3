"""The API token of the sidecar's HTTP port (``--api-token-file``; docs/lockapi.md
"Authentication").

The lock API (native and Dapr's routes) and ``POST /drained`` act on leases: served on an
address other than loopback, any pod of the network could take, release or end them. So there
they need a token (:func:`check_exposure` refuses to start without one), and whenever a token
is given every request but the probes and the read-only views (:data:`OPEN`) must carry it, as
``Authorization: Bearer <token>`` or as Dapr's ``dapr-api-token: <token>`` header, compared in
constant time (:func:`hmac.compare_digest`).

Pure parts (reading the token, the loopback rule, the check of a request's headers), then the
aiohttp middleware.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

from redlease.core.urls import is_loopback
from redlease.errors import ConfigError
from redlease.kube.sidecar_args import API_TOKEN_FILE

TOKEN_FILE_FLAG = API_TOKEN_FILE
MAX_TOKEN = 4096  # bytes of a token file (a token is a line; a bigger file is a mistake)
MIN_TOKEN = 16  # characters: a shorter token is guessable
# paths anyone on the port may read: probes, the status views, /metrics, Dapr's health probe
OPEN = frozenset({"/healthz", "/readyz", "/status", "/", "/metrics", "/v1.0/healthz"})


def read_token(path: str | Path, flag: str = TOKEN_FILE_FLAG) -> str:
    """The token in the file at ``path`` (surrounding whitespace removed: a Secret's value often
    ends with a newline); ConfigError naming ``flag`` when unreadable, empty or too short."""
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_TOKEN + 1)
    except OSError as exc:
        raise ConfigError(flag, f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_TOKEN:
        raise ConfigError(flag, f"{path} is over {MAX_TOKEN} bytes: not a token")
    try:
        token = raw.decode().strip()
    except UnicodeDecodeError:
        raise ConfigError(flag, f"{path} is not UTF-8 text") from None
    if len(token) < MIN_TOKEN or any(c.isspace() for c in token):
        raise ConfigError(
            flag, f"the token in {path} must be at least {MIN_TOKEN} characters, without spaces"
        )
    return token


def check_exposure(host: str | None, guarded: Mapping[str, bool], token: str | None) -> None:
    """Refuse to serve what acts on leases off loopback without a token: ``guarded`` maps each
    such surface's flag (``--api-locks``, ``--drain-timeout``) to whether it is on; ``host``
    is the ``--http`` host (None: no HTTP server)."""
    if token is not None or host is None or is_loopback(host):
        return
    on = [flag for flag, used in guarded.items() if used]
    if on:
        raise ConfigError(
            TOKEN_FILE_FLAG,
            f"{' and '.join(on)} on --http={host} (not loopback) needs an API token: give "
            f"{TOKEN_FILE_FLAG} (or REDLEASE_API_TOKEN_FILE), or serve on 127.0.0.1",
        )


def presented(headers: Mapping[str, str]) -> str | None:
    """The token a request carries: ``Authorization: Bearer <t>`` or ``dapr-api-token: <t>``."""
    auth = headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return headers.get("dapr-api-token") or None


def allowed(token: str, headers: Mapping[str, str]) -> bool:
    """Whether the request's headers carry ``token`` (constant-time comparison)."""
    given = presented(headers)
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def middleware(token: str) -> Middleware:
    """The aiohttp middleware: every path outside :data:`OPEN` answers 401 (JSON, naming the
    header) unless the request carries ``token``."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN or allowed(token, request.headers):
            return await handler(request)
        why = "missing" if presented(request.headers) is None else "wrong"
        return web.json_response(
            {
                "error": f"{why} API token: send Authorization: Bearer <token> or "
                "dapr-api-token: <token>",
                "field": "Authorization",
            },
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="redlease"'},
        )

    return authenticate


__all__ = [
    "OPEN",
    "TOKEN_FILE_FLAG",
    "allowed",
    "check_exposure",
    "is_loopback",
    "middleware",
    "presented",
    "read_token",
]
