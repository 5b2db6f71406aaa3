"""The lock API follows the election's configuration (``--lock-ref``): a change of nodes ends
the old target's leases (410 at the next extend, released there) before any grant on the new
one, and the API answers 503 with ``Retry-After`` while it switches (docs/lockapi.md,
"Configuration changes").

Real redis-servers and sidecar processes; the Kubernetes API is KMock."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import kmock
import pytest
from aiohttp import web

from redlease.core.connect import Target
from redlease.core.keys import LockKeys, scoped_name
from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.sidecarprocs import Sidecar, env
from redlease.kube import paths
from redlease.sidecar import lockapi, locktarget

NS = "shop"
DLOCKS = "redlease.dev/v1alpha1/distributedlocks"
LOCK_PATH = paths.lock(NS, "jobs")
NAME = "jobs/x"


@dataclass
class Answer:
    sent: float
    received: float
    status: int
    body: Any


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Answer:
    sent = time.monotonic()
    async with http.post(url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as resp:
        doc = await resp.json(content_type=None)
        return Answer(sent, time.monotonic(), resp.status, doc)


def api_sidecar(pod: str, base: str) -> Sidecar:
    return Sidecar(pod, "", [], extra=["--lock-ref", "jobs", "--api-locks", "jobs/",
                                       "--kube-api", base],
                   environ=env(POD_NAME=pod, POD_NAMESPACE=NS)).start()  # fmt: skip


@pytest.mark.slow
async def test_a_node_move_ends_the_old_leases_before_a_second_app_is_granted(
    redis_server: RedisServer,
) -> None:
    """App A holds ``jobs/x`` through sidecar 1; ``spec.nodes`` moves to another Redis; app B's
    sidecar (a new pod, started on the new nodes) is granted ``jobs/x`` there. No extend of A's
    lease is answered 200 once B was granted: A is told 410 (the switch), and its lease is
    released on the old Redis. Before: sidecar 1 kept extending on the old Redis for ever."""
    moved = RedisServer().start()
    try:
        async with kmock.KubernetesEmulator() as k8s, kmock.Server(k8s) as srv:
            k8s.resources[DLOCKS] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
            k8s.objects[DLOCKS, NS, "jobs"] = {
                "metadata": {"name": "jobs", "namespace": NS, "generation": 1},
                "spec": {"keys": ["jobs-leader"], "ttlSeconds": 3, "renewDeadlineSeconds": 2,
                         "retryPeriodSeconds": 1,
                         "nodes": [{"url": redis_server.url}]},
            }  # fmt: skip
            base = f"http://127.0.0.1:{srv.port}"
            one = api_sidecar("pod-a", base)
            two: Sidecar | None = None
            try:
                await asyncio.to_thread(one.wait_up)
                async with aiohttp.ClientSession() as http:
                    two = await scenario(http, base, one, redis_server, moved)
            finally:
                one.stop()
                if two is not None:
                    two.stop()
    finally:
        moved.stop()


async def scenario(
    http: aiohttp.ClientSession, base: str, one: Sidecar, old: RedisServer, new: RedisServer
) -> Sidecar:
    a_url = f"http://127.0.0.1:{one.port}/locks/{NAME}"
    got = await post(http, f"{a_url}/acquire", {"ttl_ms": 60_000})
    assert got.status == 200, got.body
    lease = got.body["lease"]

    headers = {"Content-Type": "application/merge-patch+json"}
    patch = {"spec": {"nodes": [{"url": new.url}]}}
    async with http.patch(base + LOCK_PATH, json=patch, headers=headers) as resp:
        assert resp.status == 200, await resp.text()

    # app A keeps extending; app B's sidecar starts on the new nodes once A heard (or after 5 s)
    extends: list[Answer] = []
    b_granted: Answer | None = None
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not any(e.status == 410 for e in extends):
        extends.append(await post(http, f"{a_url}/extend", {"lease": lease}))
        await asyncio.sleep(0.05)
    two = api_sidecar("pod-b", base)
    await asyncio.to_thread(two.wait_up)
    b_url = f"http://127.0.0.1:{two.port}/locks/{NAME}"
    deadline = time.monotonic() + 30.0
    while b_granted is None or sum(e.sent > b_granted.received for e in extends) < 5:
        assert time.monotonic() < deadline, "B was never granted, or A never extended after"
        if b_granted is None:
            b = await post(http, f"{b_url}/acquire", {"ttl_ms": 60_000})
            assert b.status in (200, 409, 503), b.body
            b_granted = b if b.status == 200 else None
        extends.append(await post(http, f"{a_url}/extend", {"lease": lease}))
        await asyncio.sleep(0.05)

    # never both: every 200 of A's extends was sent before B's grant was in hand
    late = [e for e in extends if e.status == 200 and e.sent > b_granted.received]
    assert not late, f"A's extend answered 200 {len(late)} times after B was granted jobs/x"
    gone = next(e for e in extends if e.status != 200)
    assert gone.status == 410 and gone.body["field"] == "lease", gone.body
    assert "settings changed" in gone.body["error"]
    assert all(e.status == 410 for e in extends[extends.index(gone) :])
    released = await post(http, f"{a_url}/release", {"lease": lease})
    assert released.status == 410, released.body

    # released on the old Redis (not left to its 60 s), and sidecar 1 now grants on the new
    key = LockKeys.for_name(scoped_name(NS, NAME)).lease
    with old.client() as client:
        assert not client.exists(key)
    with new.client() as client:
        assert client.exists(key)  # B's
    again = await post(http, f"{a_url}/acquire", {"ttl_ms": 60_000})
    assert again.status == 409, again.body  # held by B, on the new nodes
    return two


async def test_acquires_wait_for_the_switch_and_old_leases_answer_410(
    monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    """While the old target's leases are being released (its Redis is paused here, so the
    switch cannot finish), acquires answer 503 with ``Retry-After`` and the old lease's extend
    and release 410; once released, grants come from the new target. Before: no switch."""
    from redlease.sidecar.lockapi import LockApi  # here: main had neither
    from redlease.sidecar.locktarget import ApiTarget

    monkeypatch.setattr(lockapi, "CLOSE_TIMEOUT", 60.0)  # the switch waits for the paused node
    monkeypatch.setattr(locktarget, "CLOSE_TIMEOUT", 60.0)  # and so does the old client's close
    new = RedisServer().start()
    api = LockApi("jobs/", "pod-a")
    app = web.Application()
    api.add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}/locks/{NAME}"
    try:
        api.switch_to(ApiTarget(Target((redis_server.url,))))
        async with aiohttp.ClientSession() as http:
            held = await post(http, f"{url}/acquire", {"ttl_ms": 60_000})
            assert held.status == 200, held.body
            redis_server.pause()
            try:
                api.switch_to(ApiTarget(Target((new.url,))))
                async with http.post(f"{url}/acquire", json={"ttl_ms": 1000}) as resp:
                    assert resp.status == 503 and resp.headers["Retry-After"] == "1"
                    assert "switching" in (await resp.json())["error"]
                for verb in ("extend", "release"):
                    old = await post(http, f"{url}/{verb}", {"lease": held.body["lease"]})
                    assert (old.status, old.body["field"]) == (410, "lease"), old.body
            finally:
                redis_server.resume()

            async def granted() -> Answer | None:
                got = await post(http, f"{url}/acquire", {"ttl_ms": 60_000})
                return got if got.status == 200 else None

            deadline = time.monotonic() + 30
            while (got := await granted()) is None:
                assert time.monotonic() < deadline, "no grant after the switch"
                await asyncio.sleep(0.05)
            key = LockKeys.for_name(NAME).lease
            with new.client() as client:
                assert client.exists(key)
            with redis_server.client() as client:
                assert not client.exists(key)  # released on the old target
            assert got.body["lease"] != held.body["lease"]
    finally:
        await api.close()
        await runner.cleanup()
        new.stop()
