"""A real `redlease operator` process against KMock under API faults (docs/operator.md).

* a watch ended by 410 Gone (an ERROR event, or the HTTP status) is relisted, and the operator
  keeps handling new and changed DistributedLocks;
* the API server gone for ~30 s (connections refused, or a partition that never answers what
  was in flight): afterwards the statuses converge to what Redis says and no Event is posted
  twice;
* slow answers to one lock's status patches do not stall the status refresh of the others;
* an Event stored by the API server whose answer was lost is not stored again by the retry;
* SIGTERM while the API server refuses connections still stops the operator (the retries go
  on without end only while it runs).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from redlease import Lock
from redlease.devtools.kubeemulator import Cluster, until
from redlease.devtools.localredis import RedisServer
from redlease.devtools.operatorprocess import (
    FaultyEmulator,
    OperatorProcess,
    TcpProxy,
    event_counts,
    faulty_api,
    start_operator,
)

# seconds without an API server: longer than kopf's default retries of a request (54 s) when
# refused; 30 s of a partition (each request then hangs until its timeout)
OUTAGE = {"refuse": 70.0, "blackhole": 30.0}


Setup = tuple[FaultyEmulator, TcpProxy, OperatorProcess, Cluster]


def spec(server: RedisServer, key: str) -> dict[str, Any]:
    return {"keys": [key], "nodes": [{"url": server.url}], "ttlSeconds": 60}


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    async with faulty_api() as (emulator, proxy):
        operator = await start_operator(proxy.url, tmp_path)
        try:
            cluster = Cluster(emulator, None, proxy.url)  # type: ignore[arg-type]
            await operator.listing(emulator)
            yield emulator, proxy, operator, cluster
        finally:
            code = await operator.stop()
        assert code == 0, operator.text()


async def create_free(cluster: Cluster, server: RedisServer, name: str) -> None:
    """Create a DistributedLock on ``server`` and wait for the operator to call it Free."""
    await cluster.create(name, spec(server, name))
    await until(lambda: phase(cluster, name) == "Free", what=f"{name}: Free")


def phase(cluster: Cluster, name: str) -> Any:
    return cluster.status(name).get("phase")


def holder(cluster: Cluster, name: str) -> Any:
    return cluster.status(name).get("holder")


@pytest.mark.parametrize("how", ["event", "http"])
async def test_watch_gone_is_relisted(setup: Setup, redis_server: RedisServer, how: str) -> None:
    emulator, proxy, operator, cluster = setup
    await create_free(cluster, redis_server, "before")
    if how == "event":
        emulator.gone_events = 1
    else:
        emulator.gone_http = 1
    proxy.reset()  # the watch reconnects from its resourceVersion and is told it is gone
    await until(emulator.relisted_after_gone, timeout=30, what="a relist after the 410")
    # the operator keeps handling new and changed locks
    await create_free(cluster, redis_server, "after")
    await cluster.patch("before", {"spec": {"keys": ["before-2"]}})
    await until(
        lambda: cluster.status("before").get("observedGeneration") == 2, what="before: gen 2"
    )
    lock = Lock(redis_server.client(), "after", ttl=60, identity="pod-after")
    lock.acquire()
    await until(lambda: holder(cluster, "after") == "pod-after", what="after: Held")
    assert operator.proc.returncode is None


async def test_event_whose_answer_was_lost_is_stored_once(
    setup: Setup, redis_server: RedisServer
) -> None:
    emulator, _, operator, cluster = setup
    await create_free(cluster, redis_server, "lost")
    emulator.lost_answers = 1
    posts = emulator.event_posts()
    Lock(redis_server.client(), "lost", ttl=60, identity="pod-lost").acquire()
    await until(lambda: emulator.lost_answers == 0, what="an Event stored, its answer lost")
    await until(lambda: emulator.event_posts() >= posts + 2, timeout=30, what="the retry")
    counts = event_counts(emulator)
    held = [n for k, n in counts.items() if k[0] == "lost" and "pod-lost holds" in k[2]]
    assert held == [1], counts
    assert operator.proc.returncode is None


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", [pytest.param("refuse", marks=pytest.mark.long), "blackhole"])
async def test_api_outage_converges_without_duplicate_events(
    setup: Setup, redis_server: RedisServer, mode: str
) -> None:
    emulator, proxy, operator, cluster = setup
    client = redis_server.client()
    names = ("stays", "changes", "frees", "takes")
    for name in names:
        await cluster.create(name, spec(redis_server, name))
    locks = {name: Lock(client, name, ttl=120, identity=f"{name}-a") for name in names}
    for name in ("stays", "changes", "frees"):
        locks[name].acquire()
    for name in ("stays", "changes", "frees"):
        await until(lambda n=name: holder(cluster, n) == f"{n}-a", what=f"{name}: Held")  # type: ignore[misc]
    await until(lambda: phase(cluster, "takes") == "Free", what="takes: Free")

    await proxy.fail(mode)
    started = time.monotonic()
    # the truth changes while nobody can write it down
    locks["changes"].release()
    Lock(client, "changes", ttl=120, identity="changes-b").acquire()
    locks["frees"].release()
    Lock(client, "takes", ttl=120, identity="takes-b").acquire()
    outage = OUTAGE[mode]
    await until(lambda: time.monotonic() - started > outage, timeout=outage + 10, what="outage")
    await proxy.recover()
    recovered = time.monotonic()

    want = {"stays": "stays-a", "changes": "changes-b", "frees": None, "takes": "takes-b"}
    await until(
        lambda: {n: holder(cluster, n) for n in names} == want,
        timeout=60,
        what=f"statuses converge: {want}",
    )
    converged = time.monotonic() - recovered
    assert phase(cluster, "frees") == "Free"
    # the refresh goes on afterwards, and every Event was posted once
    Lock(client, "frees", ttl=120, identity="frees-c").acquire()
    await until(lambda: holder(cluster, "frees") == "frees-c", timeout=30, what="frees: Held")
    changes = (("changes", "changes-b"), ("takes", "takes-b"), ("frees", "frees-c"))

    def posted() -> Any:
        """The Events so far, once one names each change (an Event may be posted after the
        status patch that shows the same change)."""
        counts = event_counts(emulator)
        return (
            counts
            if all(any(k[0] == n and w in k[2] for k in counts) for n, w in changes)
            else None
        )

    counts = await until(posted, timeout=30, what=f"an Event for each of {changes}")
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, duplicates
    assert operator.proc.returncode is None
    print(f"{mode}: converged {converged:.1f}s after a {outage:.0f}s outage")


async def test_slow_status_patch_does_not_stall_others(
    setup: Setup, redis_server: RedisServer
) -> None:
    emulator, _, operator, cluster = setup
    client = redis_server.client()
    for name in ("slow", "fast"):
        await cluster.create(name, spec(redis_server, name))
    for name in ("slow", "fast"):
        await until(lambda n=name: phase(cluster, n) == "Free", what=f"{name}: Free")  # type: ignore[misc]
    emulator.slow["slow"] = 12.0  # below the request timeout: slow, not lost
    Lock(client, "slow", ttl=60, identity="slow-a").acquire()
    stalled = time.monotonic()
    # while the slow lock's patch hangs, the fast one follows two changes of its holder
    fast = Lock(client, "fast", ttl=60, identity="fast-a")
    fast.acquire()
    await until(lambda: holder(cluster, "fast") == "fast-a", timeout=5, what="fast: Held")
    fast.release()
    Lock(client, "fast", ttl=60, identity="fast-b").acquire()
    await until(lambda: holder(cluster, "fast") == "fast-b", timeout=5, what="fast: fast-b")
    assert time.monotonic() - stalled < 12.0
    assert holder(cluster, "slow") is None  # its answer is still pending
    emulator.slow.clear()
    await until(lambda: holder(cluster, "slow") == "slow-a", timeout=40, what="slow: Held")
    assert operator.proc.returncode is None


@pytest.mark.slow
async def test_sigterm_during_an_outage_stops_the_operator(
    setup: Setup, redis_server: RedisServer
) -> None:
    _, proxy, operator, cluster = setup
    await create_free(cluster, redis_server, "term")
    await proxy.fail("refuse")
    Lock(redis_server.client(), "term", ttl=60, identity="pod-term").acquire()
    await until(lambda: "will retry" in operator.text(), timeout=30, what="a failed request")
    began = time.monotonic()
    code = await operator.stop()
    took = time.monotonic() - began
    assert code == 0 and took < 25, (code, took, operator.text()[-2000:])
