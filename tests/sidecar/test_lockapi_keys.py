"""Redis keys of the lock API's names are bounded in time (issue 34, finding 7): a real sidecar
process on a real redis-server; every key a name leaves behind expires within the lease's TTL +
``FORGET_AFTER`` (docs/lockapi.md, "Redis keys"), and tokens still increase."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any

import pytest

from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar
from redlease.sidecar.lockapi import FORGET_AFTER

PREFIX = "jobs/"
TTL_MS = 2_000


def post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    return answer.status, json.loads(answer.read())


@pytest.fixture
def api(sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str) -> Sidecar:
    sc = sidecars("pod-a", lock_name, [redis_server.url], extra=["--api-locks", PREFIX])
    return sc.wait_up()


def test_every_key_of_an_api_name_expires(api: Sidecar, redis_server: RedisServer) -> None:
    """500 names acquired and released through the API: each name's keys all carry a TTL of at
    most ttl_ms + FORGET_AFTER (before: fence and history had none, 2 permanent keys a name),
    and a name acquired again gets a greater token."""
    client = redis_server.client()
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
    tokens: dict[str, int] = {}
    try:
        for i in range(500):
            name = f"{PREFIX}n{i}"
            code, doc = post(conn, f"/locks/{name}/acquire", {"ttl_ms": TTL_MS})
            assert code == 200, doc
            tokens[name] = doc["fencing_token"]
            code, doc = post(conn, f"/locks/{name}/release", {"lease": doc["lease"]})
            assert code == 200, doc
        code, doc = post(conn, f"/locks/{PREFIX}n0/acquire", {"ttl_ms": TTL_MS})
        assert code == 200 and doc["fencing_token"] > tokens[f"{PREFIX}n0"], doc
    finally:
        conn.close()
    bound_ms = TTL_MS + FORGET_AFTER * 1000 + 5  # + a counter's lead over the clock: < 5 ms
    keys = [k.decode() for k in client.scan_iter(match=f"redlease:{{{PREFIX}*", count=1000)]
    assert len(keys) >= 2 * 500  # fence and history of each name, the held lease
    permanent = [k for k in keys if not 0 < client.pttl(k) <= bound_ms]
    assert permanent == []
    seventh = LockKeys.for_name(f"{PREFIX}n7")
    assert {seventh.fence, seventh.history} <= set(keys)
    client.close()
