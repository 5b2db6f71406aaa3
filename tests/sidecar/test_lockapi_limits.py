"""The lock API's own availability and bounded state (issue 34): blocking acquires parked and
capped, bodies with a read deadline, the lease table bounded by time and exactly by count, the
Redis pool sized from the port, no hand-off to a dead waiter for its ttl_ms, every answer JSON.

Real sidecar processes (or the real API and guard in-process) on real redis-servers; raw
sockets for the clients that misbehave."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
import redis
from aiohttp import web

from redlease.core import scripts
from redlease.core.connect import validate_target
from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, until, wait_until
from redlease.serving import httpguard, portlimits
from redlease.sidecar.leasetable import Leases
from redlease.sidecar.lockapi import LockApi
from redlease.sidecar.locktarget import ApiTarget, lock_waits

PREFIX = "jobs/"
WAITS = lock_waits(portlimits.MAX_CONNECTIONS)  # 96 of a 256-connection port


# -- clients --------------------------------------------------------------------------------


def call(
    port: int, path: str, body: Any = None, method: str = "POST", timeout: float = 15
) -> tuple[int, Any]:
    """One request on a fresh connection: (status, parsed JSON body). Raises if the port does
    not answer (reset, refused, timed out)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def request_bytes(path: str, body: Any) -> bytes:
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n")  # fmt: skip
    return head.encode() + data


class Raw:
    """A client socket that sent ``data`` and collects whatever comes back until closed."""

    def __init__(self, port: int, data: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.got = b""
        self.closed = False
        with contextlib.suppress(OSError):
            self.sock.sendall(data)
        self.sock.setblocking(False)

    def poll(self) -> bytes:
        while not self.closed:
            try:
                chunk = self.sock.recv(65536)
            except BlockingIOError:
                break
            except OSError:
                self.closed = True
                break
            if not chunk:
                self.closed = True
            self.got += chunk
        return self.got

    def status(self) -> int:
        """The status of the first answer (0: none yet)."""
        head = self.poll()
        return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def api(sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str) -> Sidecar:
    return sidecars("pod-a", lock_name, [redis_server.url], extra=["--api-locks", PREFIX]).wait_up()


def probes_answer(port: int, times: int = 10) -> None:
    for _ in range(times):
        assert call(port, "/healthz", method="GET")[0] == 200
        assert call(port, "/readyz", method="GET")[0] == 200
    assert call(port, "/status", method="GET")[0] == 200


# -- finding 2: blocking acquires are parked, capped below the connection cap ----------------


@pytest.mark.slow
def test_blocking_acquires_are_parked_and_probes_and_holders_still_answer(api: Sidecar) -> None:
    code, holder = call(api.port, "/locks/jobs/held/acquire", {"ttl_ms": 60_000})
    assert code == 200, holder
    wait = request_bytes("/locks/jobs/held/acquire", {"ttl_ms": 60_000, "wait_ms": 60_000})
    waits = [Raw(api.port, wait) for _ in range(300)]
    try:
        # beyond the waits' share the port answers at once: 503 with Retry-After (or, at the
        # connection cap, drops a connection that had not been read yet)
        def settled() -> int:
            return sum(w.status() == 503 or (w.closed and not w.got) for w in waits)

        wait_until(lambda: settled() >= len(waits) - WAITS, timeout=60, step=0.1)
        refused = [w for w in waits if w.status() == 503]
        assert refused and all(b"Retry-After: 1" in w.got for w in refused)
        assert all(b"waiting-requests" in w.got for w in refused)
        assert sum(w.status() == 0 and not w.closed for w in waits) <= WAITS  # still parked

        probes_answer(api.port)
        code, doc = call(api.port, "/locks/jobs/held/extend", {"lease": holder["lease"]})
        assert code == 200, doc
        code, doc = call(api.port, "/locks/jobs/held/release", {"lease": holder["lease"]})
        assert code == 200, doc
        # the first parked waiter gets it
        wait_until(lambda: any(w.status() == 200 for w in waits), timeout=30, step=0.1)
    finally:
        for w in waits:
            w.close()


def test_a_parked_waiter_whose_client_hung_up_stops_waiting(
    api: Sidecar, redis_server: RedisServer
) -> None:
    assert call(api.port, "/locks/jobs/busy/acquire", {"ttl_ms": 60_000})[0] == 200
    waiters = LockKeys.for_name("jobs/busy").waiters
    ask = {"ttl_ms": 60_000, "wait_ms": 60_000}
    with redis.Redis.from_url(redis_server.url) as client:
        waiting = Raw(api.port, request_bytes("/locks/jobs/busy/acquire", ask))
        wait_until(lambda: client.zcard(waiters) == 1, timeout=15)
        waiting.close()  # the app gives up long before wait_ms
        wait_until(lambda: client.zcard(waiters) == 0, timeout=15)  # its place in the queue too
    probes_answer(api.port, times=1)


# -- finding 3: stalled bodies are answered 408 and closed -----------------------------------


@pytest.mark.slow
def test_stalled_bodies_time_out_and_probes_still_answer(api: Sidecar) -> None:
    head = (b"POST /locks/jobs/slow/acquire HTTP/1.1\r\nHost: sidecar\r\n"
            b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n")  # fmt: skip
    sent = time.monotonic()
    stalled = [Raw(api.port, head + b'{"ttl_ms": 10') for _ in range(270)]
    try:
        probes_answer(api.port)
        # within the body deadline (5 s) every stalled one is answered 408 and closed (or was
        # evicted for a probe)
        wait_until(lambda: all(s.poll() is not None and s.closed for s in stalled), timeout=30,
                   step=0.1)  # fmt: skip
        took = time.monotonic() - sent
        timed_out = [s for s in stalled if s.status() == 408]
        assert len(timed_out) >= 200, [s.got[:40] for s in stalled[:5]]
        assert all(b'"error"' in s.got for s in timed_out)
        assert took < portlimits.BODY_TIMEOUT + 15
        probes_answer(api.port, times=2)
    finally:
        for s in stalled:
            s.close()


# -- finding 4: the lease table (in-process: the real API and guard on a real redis-server) ---


@contextlib.asynccontextmanager
async def served(url: str, limit: int) -> AsyncIterator[tuple[LockApi, str]]:
    api = LockApi(PREFIX, "pod-a")
    api.leases = Leases(limit)
    api.switch_to(ApiTarget(validate_target([url])))
    app = web.Application()
    api.add_routes(app)
    server = await httpguard.serve(app, "127.0.0.1", 0)
    try:
        yield api, f"http://127.0.0.1:{server.port}"
    finally:
        await api.close()
        await server.close()


async def test_concurrent_acquires_grant_exactly_the_limit(redis_server: RedisServer) -> None:
    async with (
        served(redis_server.url, limit=20) as (api, base),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as session,
    ):

        async def acquire(i: int) -> int:
            url = f"{base}/locks/jobs/n{i}/acquire"
            async with session.post(url, json={"ttl_ms": 60_000}) as r:
                await r.read()
                return r.status

        codes = await asyncio.gather(*(acquire(i) for i in range(5000)))
        assert codes.count(200) == 20
        assert codes.count(429) == 5000 - 20
        assert len(api.leases) == 20 and api.leases.reserved == 0


async def test_leases_not_released_stop_counting_after_their_ttl(
    redis_server: RedisServer,
) -> None:
    async with served(redis_server.url, limit=3) as (api, base), aiohttp.ClientSession() as session:

        async def post(name: str, verb: str, body: dict[str, Any]) -> tuple[int, Any]:
            async with session.post(f"{base}/locks/{name}/{verb}", json=body) as r:
                return r.status, await r.json()

        kept = (await post("jobs/kept", "acquire", {"ttl_ms": 300}))[1]
        for name in ("jobs/a", "jobs/b"):
            assert (await post(name, "acquire", {"ttl_ms": 300}))[0] == 200
        assert (await post("jobs/c", "acquire", {"ttl_ms": 300}))[0] == 429
        code, doc = await post("jobs/kept", "extend", {"lease": kept["lease"], "ttl_ms": 60_000})
        assert code == 200, doc
        # nobody releases a and b: their places come back at their local deadlines
        await until(lambda: len(api.leases) == 1, timeout=20, what="a and b forgotten")
        assert (await post("jobs/c", "acquire", {"ttl_ms": 60_000}))[0] == 200
        code, doc = await post("jobs/kept", "extend", {"lease": kept["lease"], "ttl_ms": 60_000})
        assert code == 200, doc  # the extended one stayed


# -- finding 5: a dead waiter's hand-off is provisional --------------------------------------


@pytest.mark.slow
def test_a_dead_waiters_hand_off_expires_after_the_provisional_ttl(
    sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str
) -> None:
    extra = ["--api-locks", PREFIX]
    holder_sc = sidecars("pod-a", lock_name, [redis_server.url], extra=extra).wait_up()
    dying = sidecars("pod-b", lock_name, [redis_server.url], extra=extra).wait_up()
    waiters = LockKeys.for_name("jobs/handoff").waiters
    code, first = call(holder_sc.port, "/locks/jobs/handoff/acquire", {"ttl_ms": 60_000})
    assert code == 200
    ask = {"ttl_ms": 86_400_000, "wait_ms": 60_000}
    doomed = Raw(dying.port, request_bytes("/locks/jobs/handoff/acquire", ask))
    live: dict[str, Any] = {}
    with redis.Redis.from_url(redis_server.url) as client:
        wait_until(lambda: client.zcard(waiters) == 1, timeout=15)
        dying.signal(signal.SIGKILL)  # its app's wait is registered, the sidecar is gone
        dying.wait(10)

        def live_caller() -> None:
            live["answer"] = call(holder_sc.port, "/locks/jobs/handoff/acquire",
                                  {"ttl_ms": 10_000, "wait_ms": 30_000}, timeout=60)  # fmt: skip
            live["at"] = time.monotonic()

        thread = threading.Thread(target=live_caller)
        thread.start()
        wait_until(lambda: client.zcard(waiters) == 2, timeout=15)
        released = time.monotonic()
        code, _ = call(holder_sc.port, "/locks/jobs/handoff/release", {"lease": first["lease"]})
        assert code == 200
        thread.join(90)
    doomed.close()
    assert "answer" in live, "the live caller was not answered"
    code, doc = live["answer"]
    dead_time = live["at"] - released
    assert code == 200, doc
    assert doc["fencing_token"] > first["fencing_token"]
    # the hand-off to the dead waiter was the library's provisional one, not 86,400,000 ms
    assert dead_time < scripts.HANDED_MS / 1000 + 10, dead_time
    print(f"dead time after the release: {dead_time * 1000:.0f} ms")


# -- finding 6: the pool covers the port ----------------------------------------------------


@pytest.mark.slow
def test_waiters_on_distinct_names_leave_the_holders_extends_working(
    api: Sidecar, redis_server: RedisServer
) -> None:
    names = [f"jobs/w{i}" for i in range(150)]
    for name in names:  # every name held, so each wait pins its own wake-up connection
        assert call(api.port, f"/locks/{name}/acquire", {"ttl_ms": 60_000})[0] == 200
    code, kept = call(api.port, "/locks/jobs/kept/acquire", {"ttl_ms": 60_000})
    assert code == 200
    waits = [Raw(api.port, request_bytes(f"/locks/{n}/acquire", {"ttl_ms": 60_000,
                                                                  "wait_ms": 15_000}))
             for n in names]  # fmt: skip
    try:
        with redis.Redis.from_url(redis_server.url) as client:

            def blocked() -> int:  # the waiters' wake-up BLPOPs in Redis
                return int(client.info("clients")["blocked_clients"])

            wait_until(lambda: blocked() >= min(WAITS, 90), timeout=30, step=0.1)
        for _ in range(12):  # the holder's extend loop, while the waiters hold their BLPOPs
            code, doc = call(api.port, "/locks/jobs/kept/extend", {"lease": kept["lease"]})
            assert code == 200, doc
        wait_until(lambda: all(w.status() for w in waits), timeout=60, step=0.2)
        answers = b"".join(w.got for w in waits)
        assert b"Redis did not answer" not in answers
        codes = [w.status() for w in waits]
        assert set(codes) <= {409, 503}, codes
        assert all(b"waiting-requests" in w.got for w in waits if w.status() == 503)
    finally:
        for w in waits:
            w.close()


# -- finding 9: every answer JSON, error logs bounded ---------------------------------------


def test_the_routers_refusals_are_json(api: Sidecar) -> None:
    code, doc = call(api.port, "/nope", method="GET")
    assert code == 404 and doc["error"]
    code, doc = call(api.port, "/locks/jobs/a/acquire", method="PUT")  # GET reads a lock
    assert code == 405 and doc["error"]
    code, doc = call(api.port, "/locks/jobs/a/acquire", "[" * 3000)  # nested too deeply
    assert (code, doc["field"]) == (400, "body")


@pytest.mark.slow
def test_malformed_requests_log_rarely_and_without_a_traceback_repr(api: Sidecar) -> None:
    before = len(api.log().splitlines())
    for _ in range(300):
        bad = Raw(api.port, b"POST /locks/jobs/a/acquire HTTP/1.1\r\nContent-Length: x\r\n\r\n")
        wait_until(lambda b=bad: b.poll() is not None and b.closed, timeout=10)  # type: ignore[misc]
        bad.close()
    assert call(api.port, "/healthz", method="GET")[0] == 200
    log = api.log()
    assert "<traceback object>" not in log
    assert len(log.splitlines()) - before < 30, log[-3000:]
