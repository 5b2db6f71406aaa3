"""Many acquirers on one Redis Cluster client: nobody fails, connections per node stay bounded.

A fresh ``redis.asyncio`` ``RedisCluster`` learns its slot map on its first command. Requests
sent before then went through redis-py's own routing, which sends a keyed command it cannot
place yet to a default node: every one came back MOVED, and at the fifth (redis-py's
``reinitialize_steps``) the client closed every connection of every node, those other tasks were
reading from included: 8 tasks or more failed with "Connection closed by server". And the
request gate (:mod:`redlease.core.gate`) could not be kept on an asyncio cluster node (it
takes no attributes), so a node had a connection per task in flight.

Counted by the servers (CLIENT LIST, the client's connections named): per node, the gate's
requests, a listener per lock with waiters there, and a little slack for a dropped BLPOP
connection the server has not closed yet. 100 tasks (or threads) would need 100 otherwise.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

import redlease
from redlease import aio
from redlease.core import gate, idle
from redlease.devtools.localcluster import LocalCluster

from .test_waiters import Connections

TASKS = 50  # on one lock, and as many again each on its own lock
ROUNDS = 3


def _names(lock_name: str) -> list[str]:
    """The lock of each acquirer: the first half share one, the others one each."""
    return [lock_name] * TASKS + [f"{lock_name}-{i}" for i in range(TASKS)]


def _watch(cluster: LocalCluster, name: str) -> list[Connections]:
    return [Connections(server, name) for server in cluster.servers]


async def _rounds(lock: aio.Lock) -> None:
    for _ in range(ROUNDS):
        await lock.acquire(timeout=120)
        await asyncio.sleep(0)  # hold it across a turn of the loop
        await lock.release()


async def _all(jobs: list[Callable[[], Awaitable[None]]]) -> list[BaseException]:
    results = await asyncio.wait_for(
        asyncio.gather(*(job() for job in jobs), return_exceptions=True), 300
    )
    return [r for r in results if isinstance(r, BaseException)]


async def test_asyncio_tasks_on_one_fresh_cluster_client(
    redis_cluster: LocalCluster, lock_name: str
) -> None:
    name = f"cc-{lock_name}"[:60]
    host, port = redis_cluster.startup_nodes[0]
    watched = _watch(redis_cluster, name)
    client = AsyncRedisCluster(host=host, port=port, client_name=name)
    try:
        locks = [aio.Lock(client, n, ttl=30) for n in _names(lock_name)]
        failed = await _all([lambda lock=lock: _rounds(lock) for lock in locks])
    finally:
        await client.aclose()
        peaks = [w.stop() for w in watched]
    assert failed == [], failed[:3]
    # per node: the gate's requests, the one contended lock's listener, a dropped BLPOP's socket
    assert max(peaks) <= gate.GATE + 3, f"{peaks} connections per node for {2 * TASKS} tasks"


def test_threads_on_one_cluster_client(redis_cluster: LocalCluster, lock_name: str) -> None:
    name = f"cs-{lock_name}"[:60]
    watched = _watch(redis_cluster, name)
    client: Any = redis_cluster.client(client_name=name)
    failed: list[BaseException] = []

    def work(lock_name: str) -> None:
        lock = redlease.Lock(client, lock_name, ttl=30)
        try:
            for _ in range(ROUNDS):
                lock.acquire(timeout=120)
                lock.release()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            failed.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in _names(lock_name)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        client.close()
        peaks = [w.stop() for w in watched]
    assert not any(t.is_alive() for t in threads)
    assert failed == [], failed[:3]
    # per node: the gate's requests, the kept idle ones, the contended lock's listener, slack
    assert max(peaks) <= gate.GATE + idle.KEEP + 3, f"{peaks} connections per node"
