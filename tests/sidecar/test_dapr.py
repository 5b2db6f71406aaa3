"""Dapr's lock API (``/v1.0-alpha1/lock|unlock/{store}``) and ``GET /locks/{name}`` against a
real sidecar process on a real redis-server (docs/lockapi.md "Dapr compatibility")."""

from __future__ import annotations

import http.client
import json
import signal
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import redis

from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, wait_until
from redlease.errors import ConfigError
from redlease.sidecar import dapr

PREFIX = "jobs/"
LOCK = "/v1.0-alpha1/lock/redlease"
UNLOCK = "/v1.0-alpha1/unlock/redlease"


def call(
    sc: Sidecar,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Any]:
    """One request on a fresh connection; (status, parsed JSON, or None for an empty body)."""
    conn = http.client.HTTPConnection("127.0.0.1", sc.port, timeout=30)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", **(headers or {})})  # fmt: skip
        resp = conn.getresponse()
        text = resp.read()
        try:
            return resp.status, json.loads(text) if text else None
        except ValueError:  # not one of the API's answers (the router's own 404, say)
            return resp.status, text.decode(errors="replace")
    finally:
        conn.close()


def lock(sc: Sidecar, resource: str, owner: str, expiry: int = 60) -> tuple[int, Any]:
    doc = {"resourceId": resource, "lockOwner": owner, "expiryInSeconds": expiry}
    return call(sc, "POST", LOCK, doc)


def unlock(sc: Sidecar, resource: str, owner: str) -> tuple[int, Any]:
    return call(sc, "POST", UNLOCK, {"resourceId": resource, "lockOwner": owner})


@pytest.fixture
def start(
    sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str
) -> Callable[..., Sidecar]:
    def started(identity: str = "pod-a", *extra: str) -> Sidecar:
        args = ["--api-locks", PREFIX, *extra]
        return sidecars(identity, lock_name, [redis_server.url], extra=args).wait_up()

    return started


def test_lock_and_unlock_answer_as_dapr_does(
    start: Callable[..., Sidecar], redis_server: RedisServer
) -> None:
    sc = start()
    assert lock(sc, "order-1", "app-a") == (200, {"success": True})
    with redis.Redis.from_url(redis_server.url) as client:  # the name is the prefix + the id
        assert client.hget(LockKeys.for_name("jobs/order-1").lease, "holder") == b"pod-a"
        ttl = client.pttl(LockKeys.for_name("jobs/order-1").lease)
        assert 50_000 < ttl <= 60_000
    assert lock(sc, "order-1", "app-b") == (200, {"success": False})  # success also when false
    assert lock(sc, "order-1", "app-a") == (200, {"success": False})  # held: Dapr's SETNX
    assert unlock(sc, "order-1", "app-b") == (200, {"status": dapr.LOCK_BELONGS_TO_OTHERS})
    assert unlock(sc, "order-1", "app-a") == (200, {"status": dapr.SUCCESS})
    assert unlock(sc, "order-1", "app-a") == (200, {"status": dapr.LOCK_DOES_NOT_EXIST})
    assert lock(sc, "order-1", "app-b") == (200, {"success": True})  # free again


def test_an_expired_lock_does_not_exist(start: Callable[..., Sidecar]) -> None:
    sc = start()
    assert lock(sc, "short", "app-a", expiry=1) == (200, {"success": True})
    wait_until(lambda: lock(sc, "short", "app-b", expiry=1)[1]["success"], timeout=15, step=0.1)
    wait_until(lambda: unlock(sc, "short", "app-a")[1]["status"] == dapr.LOCK_DOES_NOT_EXIST,
               timeout=15, step=0.1)  # fmt: skip


def test_a_restarted_sidecar_unlocks_what_the_owner_locked(
    start: Callable[..., Sidecar], redis_server: RedisServer
) -> None:
    first = start("pod-a")
    assert lock(first, "report", "app-a", expiry=600) == (200, {"success": True})
    first.signal(signal.SIGKILL)  # the app and its sidecar restart: nothing kept in memory
    first.wait()
    second = start("pod-a2")
    assert lock(second, "report", "app-a") == (200, {"success": False})  # still held
    assert unlock(second, "report", "app-other") == (200, {"status": 2})
    assert unlock(second, "report", "app-a") == (200, {"status": 0})
    with redis.Redis.from_url(redis_server.url) as client:
        assert not client.exists(LockKeys.for_name("jobs/report").lease)


BAD = [
    ("/v1.0-alpha1/lock/other", {"resourceId": "a", "lockOwner": "o", "expiryInSeconds": 5},
     400, dapr.STORE_NOT_FOUND),
    ("/v1.0-alpha1/unlock/other", {"resourceId": "a", "lockOwner": "o"}, 400,
     dapr.STORE_NOT_FOUND),
    (LOCK, {"resourceId": "a", "expiryInSeconds": 5}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": "", "expiryInSeconds": 5}, 400, dapr.MALFORMED),
    (LOCK, {"lockOwner": "o", "expiryInSeconds": 5}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": "o"}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": "o", "expiryInSeconds": 0}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": "o", "expiryInSeconds": -3}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": "o", "expiryInSeconds": "5"}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": "o", "expiryInSeconds": 1.5}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": "o", "expiryInSeconds": 86_401}, 400,
     dapr.MALFORMED),
    (LOCK, {"resourceId": "a b", "lockOwner": "o", "expiryInSeconds": 5}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "x" * 300, "lockOwner": "o", "expiryInSeconds": 5}, 400,
     dapr.MALFORMED),
    (LOCK, {"resourceId": 7, "lockOwner": "o", "expiryInSeconds": 5}, 400, dapr.MALFORMED),
    (LOCK, {"resourceId": "a", "lockOwner": ["o"], "expiryInSeconds": 5}, 400, dapr.MALFORMED),
    (LOCK, ["resourceId"], 400, dapr.MALFORMED),
    (LOCK, b"{not json", 400, dapr.MALFORMED),
    (LOCK, b"x" * 5000, 413, dapr.MALFORMED),
    (UNLOCK, {"resourceId": "a"}, 400, dapr.MALFORMED),
    (UNLOCK, {"resourceId": "a#b", "lockOwner": "o"}, 400, dapr.MALFORMED),
]  # fmt: skip


def test_caller_mistakes_answer_daprs_error_codes(start: Callable[..., Sidecar]) -> None:
    sc = start()
    for path, body, status, code in BAD:
        raw = body if isinstance(body, bytes) else None
        got, doc = call(sc, "POST", path, None if raw else body, raw=raw)
        assert (got, doc["errorCode"]) == (status, code), (path, body, doc)
        assert doc["message"], doc
    assert "ERROR" not in sc.log()  # a caller's mistake is no sidecar error


def test_metadata_and_healthz_for_the_sdks(start: Callable[..., Sidecar]) -> None:
    sc = start()
    code, doc = call(sc, "GET", "/v1.0/metadata")
    assert code == 200
    assert {"name": "redlease", "type": "lock.redlease"}.items() <= doc["components"][0].items()
    assert call(sc, "GET", "/v1.0/healthz") == (204, None)


def test_the_store_name_is_configurable_and_dapr_can_be_off(
    start: Callable[..., Sidecar],
) -> None:
    named = start("pod-a", "--dapr-store", "locks")
    doc = {"resourceId": "a", "lockOwner": "o", "expiryInSeconds": 5}
    assert call(named, "POST", "/v1.0-alpha1/lock/locks", doc) == (200, {"success": True})
    assert call(named, "POST", LOCK, doc)[1]["errorCode"] == dapr.STORE_NOT_FOUND
    off = start("pod-b", "--dapr-store", "")
    assert call(off, "POST", "/v1.0-alpha1/lock/locks", doc)[0] == 404
    assert call(off, "POST", "/locks/jobs/z/acquire", {"ttl_ms": 1000})[0] == 200


def test_get_lock_says_who_holds_it_with_which_token_for_how_long(
    start: Callable[..., Sidecar],
) -> None:
    sc = start()
    code, lease = call(sc, "POST", "/locks/jobs/nightly/acquire", {"ttl_ms": 30_000})
    assert code == 200, lease
    code, doc = call(sc, "GET", "/locks/jobs/nightly")
    assert code == 200, doc
    assert (doc["name"], doc["holder"], doc["fencing_token"]) == (
        "jobs/nightly", "pod-a", lease["fencing_token"],
    )  # fmt: skip
    assert 0 < doc["expires_in_ms"] <= 30_000
    assert doc["acquired_at"] is not None
    code, doc = call(sc, "GET", "/locks/jobs/free")
    assert (code, doc["holder"], doc["fencing_token"], doc["expires_in_ms"]) == (
        200, None, None, None,
    )  # fmt: skip
    code, doc = call(sc, "GET", "/locks/other")
    assert (code, doc["field"]) == (403, "name")
    # a Dapr lock shows too (its holder is the sidecar's identity)
    assert lock(sc, "order-9", "app-a")[1]["success"]
    assert call(sc, "GET", "/locks/jobs/order-9")[1]["holder"] == "pod-a"


def test_owner_tokens_are_derived_per_lock_and_owner() -> None:
    token = dapr.owner_token("jobs/a", "app-a")
    assert token == dapr.owner_token("jobs/a", "app-a")  # any sidecar, any restart
    assert len(token) == 32 and int(token, 16) >= 0
    others = {dapr.owner_token("jobs/b", "app-a"), dapr.owner_token("jobs/a", "app-b"),
              dapr.owner_token("jobs/a\0app-", "a")}  # fmt: skip
    assert token not in others and len(others) == 3
    assert "app-a" not in token


def test_store_names() -> None:
    assert dapr.validate_store("redlease") == "redlease"
    assert dapr.validate_store("") is None
    for bad in ("Locks", "a_b", "-a", "x" * 64):
        with pytest.raises(ConfigError):
            dapr.validate_store(bad)
