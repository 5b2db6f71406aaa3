"""The lock API (``--api-locks``) from a non-Python client: curl against a real sidecar process on
a real redis-server (docs/lockapi.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from redlease.core.keys import LockKeys
from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, wait_until

CURL = shutil.which("curl")
pytestmark = pytest.mark.skipif(CURL is None, reason="no curl on this machine")

PREFIX = "jobs/"


def curl(sc: Sidecar, path: str, body: Any = None, raw: str | None = None) -> tuple[int, Any]:
    """POST ``body`` (as JSON, or ``raw`` as it is) with curl; (status, parsed JSON answer)."""
    data = raw if raw is not None else json.dumps(body if body is not None else {})
    assert CURL is not None
    out = subprocess.run(
        [CURL, "-sSg", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
         data, "-w", "\n%{http_code}", "--max-time", "30", f"http://127.0.0.1:{sc.port}{path}"],
        capture_output=True, text=True, timeout=40, check=True,
    )  # fmt: skip
    text, _, code = out.stdout.rpartition("\n")
    try:
        return int(code), json.loads(text)
    except ValueError:  # not one of the API's answers (aiohttp's own 404, say)
        return int(code), text


@pytest.fixture
def api(sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str) -> Sidecar:
    sc = sidecars("pod-a", lock_name, [redis_server.url], extra=["--api-locks", PREFIX])
    return sc.wait_up()


def acquire(sc: Sidecar, name: str, ttl_ms: int = 10_000, wait_ms: int = 0) -> tuple[int, Any]:
    return curl(sc, f"/locks/{name}/acquire", {"ttl_ms": ttl_ms, "wait_ms": wait_ms})


def test_acquire_contend_extend_release(api: Sidecar) -> None:
    code, first = acquire(api, "jobs/nightly")
    assert code == 200, first
    assert set(first) == {"lease", "fencing_token", "expires_in_ms"}
    assert 0 < first["expires_in_ms"] <= 10_000

    code, doc = acquire(api, "jobs/nightly")
    assert (code, doc["holder"]) == (409, "pod-a")

    code, doc = curl(api, "/locks/jobs/nightly/extend", {"lease": first["lease"], "ttl_ms": 20_000})
    assert code == 200, doc
    assert doc["lease"] == first["lease"]
    assert doc["fencing_token"] == first["fencing_token"]
    assert 10_000 < doc["expires_in_ms"] <= 20_000

    # a lease id is bound to its name
    code, doc = curl(api, "/locks/jobs/other/release", {"lease": first["lease"]})
    assert (code, doc["field"]) == (404, "lease")

    code, doc = curl(api, "/locks/jobs/nightly/release", {"lease": first["lease"]})
    assert code == 200, doc
    code, doc = curl(api, "/locks/jobs/nightly/release", {"lease": first["lease"]})
    assert code == 404  # forgotten once released

    code, second = acquire(api, "jobs/nightly")
    assert code == 200, second
    assert second["fencing_token"] > first["fencing_token"]
    assert second["lease"] != first["lease"]


def test_blocking_acquire_gets_the_lock_when_the_holder_releases(
    api: Sidecar, redis_server: RedisServer
) -> None:
    code, first = acquire(api, "jobs/queue")
    assert code == 200
    result: dict[str, Any] = {}

    def wait_for_it() -> None:
        result["answer"] = acquire(api, "jobs/queue", wait_ms=20_000)
        result["done"] = time.monotonic()

    waiting = threading.Thread(target=wait_for_it)
    waiting.start()
    with redis.Redis.from_url(redis_server.url) as client:  # the sidecar waits for a wake-up
        wait_until(lambda: client.zcard(LockKeys.for_name("jobs/queue").waiters), timeout=15)
    assert "answer" not in result
    released = time.monotonic()
    code, _ = curl(api, "/locks/jobs/queue/release", {"lease": first["lease"]})
    assert code == 200
    waiting.join(30)
    code, second = result["answer"]
    assert code == 200, second
    assert second["fencing_token"] > first["fencing_token"]
    # woken by the release (a notified wait), far sooner than the 20 s wait
    assert result["done"] - released < 5.0


def test_blocking_acquire_times_out_with_409(api: Sidecar) -> None:
    assert acquire(api, "jobs/busy")[0] == 200
    start = time.monotonic()
    code, doc = acquire(api, "jobs/busy", wait_ms=400)
    elapsed = time.monotonic() - start
    assert (code, doc["holder"]) == (409, "pod-a")
    assert 0.4 <= elapsed < 10.0


def test_lost_lease_answers_410(api: Sidecar, redis_server: RedisServer) -> None:
    code, short = acquire(api, "jobs/short", ttl_ms=10_000)
    assert code == 200
    with redis.Redis.from_url(redis_server.url) as client:  # the lease vanishes
        client.delete(LockKeys.for_name("jobs/short").lease)
    code, doc = curl(api, "/locks/jobs/short/extend", {"lease": short["lease"]})
    assert (code, doc["field"]) == (410, "lease")
    code, doc = curl(api, "/locks/jobs/short/extend", {"lease": short["lease"]})
    assert code == 404  # a lost lease is forgotten

    code, expiring = acquire(api, "jobs/expiring", ttl_ms=100)
    assert code == 200
    code, taker = acquire(api, "jobs/expiring", ttl_ms=10_000, wait_ms=5_000)
    assert code == 200, taker
    assert taker["fencing_token"] > expiring["fencing_token"]
    code, doc = curl(api, "/locks/jobs/expiring/release", {"lease": expiring["lease"]})
    assert code == 410, doc


def test_fencing_tokens_strictly_increase_across_holders(api: Sidecar) -> None:
    tokens = []
    for _ in range(5):
        code, doc = acquire(api, "jobs/fenced")
        assert code == 200
        tokens.append(doc["fencing_token"])
        assert curl(api, "/locks/jobs/fenced/release", {"lease": doc["lease"]})[0] == 200
    assert tokens == sorted(set(tokens))


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/locks/other/acquire", {"ttl_ms": 1000}, 403, "name"),
        ("/locks/jobs/a{b}/acquire", {"ttl_ms": 1000}, 400, "name"),
        ("/locks/jobs/a/acquire", {}, 400, "ttl_ms"),
        ("/locks/jobs/a/acquire", {"ttl_ms": "1000"}, 400, "ttl_ms"),
        ("/locks/jobs/a/acquire", {"ttl_ms": 10}, 400, "ttl_ms"),
        ("/locks/jobs/a/acquire", {"ttl_ms": 1000, "wait_ms": -1}, 400, "wait_ms"),
        ("/locks/jobs/a/acquire", {"ttl_ms": 1000, "wait_ms": 10**9}, 400, "wait_ms"),
        ("/locks/jobs/a/acquire", "{not json", 400, "body"),
        ("/locks/jobs/a/acquire", "[1]", 400, "body"),
        ("/locks/jobs/a/acquire", "x" * 5000, 413, "body"),
        ("/locks/jobs/a/extend", {"ttl_ms": 1000}, 400, "lease"),
        ("/locks/jobs/a/extend", {"lease": "nope", "ttl_ms": True}, 400, "ttl_ms"),
        ("/locks/jobs/a/release", {"lease": 5}, 400, "lease"),
        ("/locks/jobs/a/release", {"lease": "nope"}, 404, "lease"),
    ],
)
def test_refusals_name_the_field(
    api: Sidecar, path: str, body: Any, status: int, field: str
) -> None:
    if isinstance(body, str):
        code, doc = curl(api, path, raw=body)
    else:
        code, doc = curl(api, path, body)
    assert (code, doc["field"]) == (status, field), doc


def test_sigterm_releases_the_apps_leases(api: Sidecar, redis_server: RedisServer) -> None:
    assert acquire(api, "jobs/held", ttl_ms=60_000)[0] == 200
    keys = LockKeys.for_name("jobs/held")
    with redis.Redis.from_url(redis_server.url) as client:
        assert client.exists(keys.lease)
        api.signal(15)
        assert api.wait(15) == 0
        assert not client.exists(keys.lease)


def test_off_by_default(
    sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str
) -> None:
    sc = sidecars("pod-b", lock_name, [redis_server.url]).wait_up()
    code, _ = curl(sc, "/locks/jobs/a/acquire", {"ttl_ms": 1000})
    assert code in (404, 405)


def test_a_client_that_hangs_up_while_waiting_leaves_no_lease(api: Sidecar) -> None:
    code, first = acquire(api, "jobs/hangup")
    assert code == 200
    assert CURL is not None
    impatient = subprocess.Popen(  # waits 20 s for the lock, but gives up after 1 s
        [CURL, "-sS", "-X", "POST", "--max-time", "1", "-d", '{"ttl_ms": 60000, "wait_ms": 20000}',
         f"http://127.0.0.1:{api.port}/locks/jobs/hangup/acquire"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert impatient.wait(30) != 0  # curl timed out: nobody knows the lease id it would get
    assert curl(api, "/locks/jobs/hangup/release", {"lease": first["lease"]})[0] == 200
    # the sidecar grants the waiter it still has, sees the client gone and releases
    wait_until(lambda: acquire(api, "jobs/hangup")[0] == 200, timeout=15, step=0.05)


def test_on_a_redlock_set_and_a_cluster(
    sidecars: Callable[..., Sidecar],
    redis_nodes: list[RedisServer],
    redis_cluster: LocalCluster,
    lock_name: str,
) -> None:
    quorum = sidecars("pod-q", lock_name, [s.url for s in redis_nodes],
                      extra=["--api-locks", PREFIX])  # fmt: skip
    seeds = [s.url for s in redis_cluster.servers]
    cluster = sidecars("pod-c", lock_name, seeds, extra=["--api-locks", PREFIX, "--cluster"])
    for sc in (quorum, cluster):
        sc.wait_up()
        code, first = acquire(sc, "jobs/anywhere")
        assert code == 200, first
        code, doc = acquire(sc, "jobs/anywhere", wait_ms=200)
        assert (code, doc["holder"]) == (409, sc.identity)
        assert curl(sc, "/locks/jobs/anywhere/extend", {"lease": first["lease"]})[0] == 200
        assert curl(sc, "/locks/jobs/anywhere/release", {"lease": first["lease"]})[0] == 200
        code, second = acquire(sc, "jobs/anywhere")
        assert code == 200 and second["fencing_token"] > first["fencing_token"]
