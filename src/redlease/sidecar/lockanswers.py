"""The lock API's requests and answers (pure; docs/lockapi.md): what a body must hold, which
names the app may lock, and the error answers (:class:`ApiError`, its HTTP status and JSON body)
that :mod:`redlease.sidecar.lockapi` and the Dapr lock (:mod:`redlease.sidecar.dapr`) send."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from redlease.core.keys import validate_name
from redlease.core.lease import Lease
from redlease.core.timing import TTL_RANGE
from redlease.errors import ConfigError, ConnectionLimit, LockContention, LockError, NotOwned

MAX_BODY = 4096  # bytes of a request body; the largest valid one is under 200
MAX_WAIT_MS = 60_000  # longest blocking acquire: an HTTP request should not hang for longer
TTL_MS = (round(TTL_RANGE[0] * 1000), round(TTL_RANGE[1] * 1000))
RETRY_AFTER_S = 1  # Retry-After of a 503 for a limit of this sidecar or while switching


class ApiError(Exception):
    """An answer other than 200: its HTTP status and the JSON body (``field`` names the bad
    one); ``headers`` (``Retry-After``) go with it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        retry_after: int | None = None,
        **extra: Any,
    ):
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"error": message, **extra}
        self.headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        if field is not None:
            self.body["field"] = field


# -- validation (pure) -------------------------------------------------------------------------


def validate_prefix(value: str | None, flag: str = "--api-locks") -> str | None:
    """The ``--api-locks`` prefix: None (off) when empty, else a valid start of a lock name."""
    if not value:
        return None
    return validate_name(value, flag, scoped=False)


def check_name(name: str, prefix: str) -> str:
    """``name`` if the app may lock it: 403 outside ``prefix``, 400 if not a lock name."""
    if not name.startswith(prefix):
        raise ApiError(403, f"lock names must start with {prefix!r}", field="name")
    try:
        return validate_name(name, "name", scoped=False)
    except ConfigError as exc:
        raise ApiError(400, exc.message, field="name") from None


def parse_body(raw: bytes) -> dict[str, Any]:
    """A JSON object (an empty body is ``{}``); 400 otherwise."""
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not JSON", field="body") from None
    except RecursionError:  # nested deeper than the parser goes: no valid body is
        raise ApiError(400, "the body is nested too deeply", field="body") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "the body must be a JSON object", field="body")
    return doc


def _integer(doc: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    """``doc[name]``, an integer in ``lo``-``hi``; None when absent; 400 otherwise."""
    if name not in doc:
        return None
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer, got {value!r}", field=name)
    if not lo <= value <= hi:
        raise ApiError(400, f"{name} must be {lo}-{hi}, got {value}", field=name)
    return value


def _lease_id(doc: dict[str, Any]) -> str:
    value = doc.get("lease")
    if not isinstance(value, str) or not value:
        raise ApiError(400, "lease must be the lease id acquire answered", field="lease")
    return value


@dataclass(frozen=True, slots=True)
class AcquireRequest:
    ttl_ms: int
    wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class ExtendRequest:
    lease: str
    ttl_ms: int | None = None  # None: the TTL the lease was acquired with


def parse_acquire(raw: bytes) -> AcquireRequest:
    """``{"ttl_ms": int in the TTL range, "wait_ms": 0-MAX_WAIT_MS (default 0)}``."""
    doc = parse_body(raw)
    if "ttl_ms" not in doc:
        raise ApiError(400, "ttl_ms is required", field="ttl_ms")
    ttl = _integer(doc, "ttl_ms", *TTL_MS)
    assert ttl is not None
    return AcquireRequest(ttl, _integer(doc, "wait_ms", 0, MAX_WAIT_MS) or 0)


def parse_extend(raw: bytes) -> ExtendRequest:
    """``{"lease": id, "ttl_ms"?: int in the TTL range}``."""
    doc = parse_body(raw)
    return ExtendRequest(_lease_id(doc), _integer(doc, "ttl_ms", *TTL_MS))


def parse_release(raw: bytes) -> str:
    """``{"lease": id}``: the lease id."""
    return _lease_id(parse_body(raw))


# -- answers (pure) ---------------------------------------------------------------------------


def granted(lease_id: str, lease: Lease) -> dict[str, Any]:
    """200 of acquire and extend. ``expires_in_ms`` counts to the local deadline (the TTL less
    the drift allowance, from when the request was sent), so it never overstates the lease."""
    return {
        "lease": lease_id,
        "fencing_token": lease.fencing_token,
        "expires_in_ms": max(0, int(lease.remaining() * 1000)),
    }


def held(name: str, exc: LockContention) -> ApiError:
    """409: the lock is held (by ``holder``, when the nodes said who)."""
    return ApiError(409, f"lock {name!r} is held", holder=exc.holder)


def lost(lease_id: str, exc: NotOwned) -> ApiError:
    """410: the lease ended (expired, or taken after it expired); the id is forgotten."""
    return ApiError(410, f"lease {lease_id!r} was lost: {exc.message}", field="lease")


def unavailable(exc: LockError) -> ApiError:
    """503: Redis did not answer, or (with ``Retry-After``) a limit of this sidecar's client
    did (:class:`~redlease.errors.ConnectionLimit`: not an outage of Redis)."""
    if isinstance(exc, ConnectionLimit):
        why = f"this sidecar's Redis connections are all in use: {exc.message}"
        return ApiError(503, why, retry_after=RETRY_AFTER_S, limit="redis-connections")
    return ApiError(503, f"Redis did not answer: {exc.message}")


def switching() -> ApiError:
    """503 while the API moves to the lock's new Redis settings."""
    return ApiError(
        503,
        "the lock's Redis settings changed: switching to the new ones, retry",
        retry_after=RETRY_AFTER_S,
    )


def too_many_waits(acquires: int, parked: int) -> ApiError:
    """503 with ``Retry-After``: the port's share of parked blocking acquires (or all its
    parked places, long-polls included) is taken."""
    why = (f"too many waiting requests ({acquires} blocking acquires, {parked} in all): "
           "retry, or use wait_ms 0")  # fmt: skip
    return ApiError(503, why, retry_after=RETRY_AFTER_S, limit="waiting-requests")


__all__ = [
    "MAX_BODY",
    "MAX_WAIT_MS",
    "RETRY_AFTER_S",
    "TTL_MS",
    "AcquireRequest",
    "ApiError",
    "ExtendRequest",
    "check_name",
    "granted",
    "held",
    "lost",
    "parse_acquire",
    "parse_body",
    "parse_extend",
    "parse_release",
    "switching",
    "too_many_waits",
    "unavailable",
    "validate_prefix",
]
