"""Dapr's distributed-lock API on the lock API's port (``--api-locks``; docs/lockapi.md "Dapr
compatibility"), so that apps written for Dapr's lock building block work unchanged.

``POST /v1.0-alpha1/lock/{store}`` ``{"resourceId", "lockOwner", "expiryInSeconds"}`` -> 200
``{"success": bool}``; ``POST /v1.0-alpha1/unlock/{store}`` ``{"resourceId", "lockOwner"}`` ->
200 ``{"status": 0 | 1 | 2}`` (success, no such lock, another owner's); ``GET /v1.0/metadata``
(Dapr's SDKs poll it before their first call) and ``GET /v1.0/healthz``. Errors are Dapr's
``{"errorCode", "message"}`` with Dapr's codes and statuses (``pkg/messages`` of dapr/dapr):
every caller mistake a 4xx.

The redlease lock name is the ``--api-locks`` prefix followed by ``resourceId`` (the prefix
scopes the ids as Dapr's own key prefix does), validated like every lock name. Dapr's
``lockOwner`` is chosen by the caller and may unlock after a restart of the app or of the
sidecar, so the lease's owner token in Redis is not random: it is derived from (lock name,
owner) by :func:`owner_token`, the same in every sidecar. Dapr locks are not kept in the native
lease table (Dapr has no extend): the token is all an unlock needs.

Pure parts first (the bodies, the token, the answers), then :class:`DaprApi`, the handlers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from redlease import __version__
from redlease.core.aio import Lock
from redlease.core.handles import Held, check_timeout
from redlease.core.lease import Lease
from redlease.core.requests import Flow
from redlease.errors import ConfigError, LockError, NotOwned
from redlease.sidecar.lockanswers import TTL_MS, ApiError, check_name, parse_body
from redlease.sidecar.lockapi import LockApi
from redlease.sidecar.lockhttp import read_capped

DEFAULT_STORE = "redlease"  # --dapr-store: the store name apps pass (Dapr's component name)
API_ALPHA = "/v1.0-alpha1"
MAX_EXPIRY = TTL_MS[1] // 1000  # seconds: the longest TTL of the native API
OWNER_MAX = 256  # characters of a lockOwner (a caller's string: bounded like every input)

# unlock's status numbers (Dapr's UnlockResponse.Status)
SUCCESS, LOCK_DOES_NOT_EXIST, LOCK_BELONGS_TO_OTHERS, INTERNAL_ERROR = 0, 1, 2, 3

# Dapr's error codes (dapr/dapr pkg/messages): every bad body field is ERR_MALFORMED_REQUEST
MALFORMED = "ERR_MALFORMED_REQUEST"
STORE_NOT_FOUND = "ERR_LOCK_STORE_NOT_FOUND"
TRY_LOCK = "ERR_TRY_LOCK"
UNLOCK = "ERR_UNLOCK"
NOT_READY = "ERR_HEALTH_NOT_READY"

# domain separation of the owner tokens (fixed: every sidecar derives the same token)
TOKEN_DOMAIN = b"redlease/dapr-lock-owner/v1"
STORE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a Dapr component's (DNS label)


class DaprError(Exception):
    """An answer other than 200, in Dapr's shape ``{"errorCode", "message"}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"errorCode": code, "message": message}


def from_api(exc: ApiError, code: str) -> DaprError:
    """A native answer (:class:`~redlease.sidecar.lockanswers.ApiError`) in Dapr's shape: a 4xx
    is the caller's (``ERR_MALFORMED_REQUEST``), anything else ``code`` (Dapr's ERR_TRY_LOCK
    or ERR_UNLOCK) with its own status (503: Redis did not answer, or the sidecar stops)."""
    message = str(exc.body.get("error", exc))
    return DaprError(exc.status, MALFORMED if 400 <= exc.status < 500 else code, message)


# -- validation (pure) -------------------------------------------------------------------------


def validate_store(value: str | None, flag: str = "--dapr-store") -> str | None:
    """The lock store name Dapr apps pass: None (Dapr's routes off) when empty, else a DNS
    label (a Dapr component's name)."""
    if not value:
        return None
    if not STORE_NAME.fullmatch(value):
        raise ConfigError(flag, f"a lock store name is a DNS label (a-z 0-9 -), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class LockRequest:
    resource_id: str
    owner: str
    expiry_s: int = 0  # unlock: unused


def _string(doc: dict[str, Any], field: str, store: str, limit: int) -> str:
    value = doc.get(field)
    if value is None or value == "":
        raise DaprError(400, MALFORMED, f"{field[0].upper()}{field[1:]} is empty in lock store "
                                        f"{store}")  # fmt: skip
    if not isinstance(value, str) or len(value) > limit:
        raise DaprError(400, MALFORMED, f"{field} must be a string of 1-{limit} characters")
    return value


def parse_request(raw: bytes, store: str, *, expiry: bool) -> LockRequest:
    """A lock (``expiry``) or unlock body; :class:`DaprError` 400 naming the bad field."""
    try:
        doc = parse_body(raw)
    except ApiError as exc:
        raise DaprError(400, MALFORMED, f"failed deserializing HTTP body: {exc}") from None
    resource = _string(doc, "resourceId", store, 200)
    owner = _string(doc, "lockOwner", store, OWNER_MAX)
    if not expiry:
        return LockRequest(resource, owner)
    value = doc.get("expiryInSeconds", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DaprError(400, MALFORMED, f"expiryInSeconds must be an integer, got {value!r}")
    if value <= 0:
        raise DaprError(400, MALFORMED, f"ExpiryInSeconds is not positive in lock store {store}")
    if value > MAX_EXPIRY:
        raise DaprError(400, MALFORMED, f"expiryInSeconds must be 1-{MAX_EXPIRY}, got {value}")
    return LockRequest(resource, owner, value)


def lock_name(prefix: str, resource_id: str) -> str:
    """The redlease lock name of ``resource_id``: the prefix followed by it; 400 if that is not
    a lock name."""
    try:
        return check_name(prefix + resource_id, prefix)
    except ApiError as exc:
        raise DaprError(400, MALFORMED, f"resourceId: {exc}") from None


def owner_token(name: str, owner: str) -> str:
    """The owner token of ``owner``'s lease on lock ``name`` in Redis (32 hex digits, like a
    random one): the same for the same pair in every sidecar and after any restart, so that
    the owner can unlock; different per lock name, and the owner string is not readable from
    it. Whoever knows the owner string can unlock (as in Dapr)."""
    digest = hashlib.blake2b(
        name.encode() + b"\0" + owner.encode(), key=TOKEN_DOMAIN, digest_size=16
    )
    return digest.hexdigest()


class OwnedLock(Lock):
    """A :class:`~redlease.core.aio.Lock` whose owner token is given (:func:`owner_token`)
    instead of drawn at random: an acquire uses it, and a release by a handle that never
    acquired (a later request, another process) releases the lease of that token."""

    def __init__(self, client: Any, name: Any, *, token: str, **options: Any) -> None:
        super().__init__(client, name, **options)
        self.token = token

    def _begin_acquire(
        self, owner: Any, blocking: bool, timeout: float | None, socket_timeout: float | None
    ) -> tuple[Flow, Callable[[], Flow], str]:
        check_timeout(blocking, timeout)
        flow, cleanup = self._acquire_flow(self.token, blocking, timeout, socket_timeout)
        return flow, cleanup, self.token

    def _begin_release(self, owner: Any) -> tuple[Flow, Held]:
        held = self._held(owner) or Held(self.token, Lease(self.name, 0, self.ttl, 0.0, 0))
        return self._release_flow(self.token, True), held


# -- the handlers ------------------------------------------------------------------------------


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class DaprApi:
    """Dapr's lock routes over a :class:`~redlease.sidecar.lockapi.LockApi` (its prefix, Redis
    target, readiness and acquire), for the lock store named ``store``."""

    def __init__(self, api: LockApi, store: str = DEFAULT_STORE) -> None:
        self.api = api
        self.store = store

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post(API_ALPHA + "/lock/{store}", _answering(self._lock))
        app.router.add_post(API_ALPHA + "/unlock/{store}", _answering(self._unlock))
        app.router.add_get("/v1.0/metadata", _answering(self._metadata))
        app.router.add_get("/v1.0/healthz", self._healthz)

    def _check_store(self, request: web.Request) -> None:
        store = request.match_info["store"]
        if store != self.store:
            raise DaprError(400, STORE_NOT_FOUND, f"lock store {store} not found")

    async def _read(self, request: web.Request, *, expiry: bool) -> tuple[str, LockRequest]:
        self._check_store(request)
        try:
            raw = await read_capped(request)
        except ApiError as exc:
            raise from_api(exc, MALFORMED) from None
        ask = parse_request(raw, self.store, expiry=expiry)
        name = lock_name(self.api.prefix, ask.resource_id)
        return name, ask

    async def _lock(self, request: web.Request) -> dict[str, Any]:
        name, ask = await self._read(request, expiry=True)
        try:
            self.api.check_ready()
            await self.api.take(name, ask.expiry_s * 1000, cls=OwnedLock,
                                token=owner_token(name, ask.owner))  # fmt: skip
        except ApiError as exc:
            if exc.status == 409:  # held (by another owner, or already by this one)
                return {"success": False}
            raise from_api(exc, TRY_LOCK) from None
        return {"success": True}

    async def _unlock(self, request: web.Request) -> dict[str, Any]:
        name, ask = await self._read(request, expiry=False)
        try:
            self.api.check_ready()
            lock = self.api.handle(name, TTL_MS[0], OwnedLock, token=owner_token(name, ask.owner))
        except ApiError as exc:
            raise from_api(exc, UNLOCK) from None
        try:
            await lock.release()
        except NotOwned:  # not this owner's: free, or held by another (or not known: others')
            try:
                view = await self.api.view(name)
            except ApiError as exc:
                raise from_api(exc, UNLOCK) from None
            free = not view.held and view.unknown is None
            return {"status": LOCK_DOES_NOT_EXIST if free else LOCK_BELONGS_TO_OTHERS}
        except LockError as exc:
            raise DaprError(503, UNLOCK, f"Redis did not answer: {exc.message}") from None
        return {"status": SUCCESS}

    async def _metadata(self, _: web.Request) -> dict[str, Any]:
        """What Dapr's SDKs read before their first call (any non-empty 2xx JSON will do; this
        names the one lock store)."""
        return {
            "id": self.api.identity,
            "runtimeVersion": f"redlease-{__version__}",
            "enabledFeatures": [],
            "components": [
                {"name": self.store, "type": "lock.redlease", "version": "v1", "capabilities": []}
            ],
            "extended": {"redlease.prefix": self.api.prefix},
        }

    async def _healthz(self, _: web.Request) -> web.Response:
        """204 once the lock store is usable (Dapr's answer), else 500 ERR_HEALTH_NOT_READY."""
        try:
            self.api.check_ready()
        except ApiError as exc:
            body = {"errorCode": NOT_READY, "message": str(exc)}
            return web.json_response(body, status=500)
        return web.Response(status=204)


def _answering(handler: Callable[[web.Request], Awaitable[dict[str, Any]]]) -> Handler:
    """``handler``'s dict as a 200 JSON answer, a :class:`DaprError` as its status."""

    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return web.json_response(await handler(request))
        except DaprError as exc:
            return web.json_response(exc.body, status=exc.status)

    return answer


__all__ = [
    "DEFAULT_STORE",
    "DaprApi",
    "DaprError",
    "LockRequest",
    "OwnedLock",
    "lock_name",
    "owner_token",
    "parse_request",
    "validate_store",
]
