"""A node paused (SIGSTOP) or killed in the middle of an acquisition never leaves part of a lease
held: single-key and multi-key, one redis-server and a Redis Cluster, blocking and asyncio.

The undo of a request that got no reply is written behind it on the same connection: a paused
node runs both, in order, when it resumes (an undo on a new connection could run first). Each
test checks every key on every reachable node after the fact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

import redlease
from redlease import LockUnavailable, aio
from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.localredis import RedisServer
from redlease.devtools.multikey import (
    After,
    AsyncAfter,
    acquire_of,
    fence_of,
    lease_of,
    master_of,
    spread,
)
from redlease.devtools.polling import async_wait_until, wait_until


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A cluster of its own: these tests pause and kill its nodes."""
    with LocalCluster() as c:
        yield c


def no_lease_anywhere(servers: list[RedisServer], names: list[str]) -> bool:
    return all(not lease_of(s, n) for s in servers if s.alive for n in names)


# --- one node: the undo of a timed-out request runs after it ----------------------------------


@pytest.mark.parametrize("names", [["solo"], ["m-a", "m-b"]], ids=["lock", "multilock"])
def test_timed_out_acquire_is_undone_behind_it(redis_server: RedisServer, names: list[str]) -> None:
    client = redis_server.client(socket_timeout=0.3)
    lock = redlease.MultiLock(client, names, ttl=30)
    first = lock.acquire().fencing_token  # loads the scripts: the paused server can run them
    lock.release()
    redis_server.pause()
    try:
        with pytest.raises(LockUnavailable):
            lock.acquire(blocking=False)  # no reply; the undo is written while still paused
    finally:
        redis_server.resume()
    probe = redis_server.client()
    wait_until(lambda: fence_of(probe, names[0]) > first)  # the acquire ran after the resume,
    wait_until(lambda: no_lease_anywhere([redis_server], names))  # and its undo after it
    taken = fence_of(probe, names[0])
    assert redlease.MultiLock(probe, names, ttl=5).acquire(blocking=False).fencing_token > taken


async def test_async_timed_out_acquire_is_undone_behind_it(redis_server: RedisServer) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port, socket_timeout=0.3)
    lock = aio.MultiLock(client, ["am-a", "am-b"], ttl=30)
    first = (await lock.acquire()).fencing_token
    await lock.release()
    redis_server.pause()
    try:
        with pytest.raises(LockUnavailable):
            await lock.acquire(blocking=False)
    finally:
        redis_server.resume()
    probe = redis_server.client()
    wait_until(lambda: fence_of(probe, "am-a") > first)
    wait_until(lambda: no_lease_anywhere([redis_server], ["am-a", "am-b"]))
    await client.aclose()


# --- a cluster: names on different masters -------------------------------------------------------


def test_cluster_node_paused_mid_acquire_leaves_nothing(cluster: LocalCluster) -> None:
    a, b = spread("paused", 2)
    node_a, node_b = cluster.servers[master_of(a)], cluster.servers[master_of(b)]
    client = cluster.client(socket_timeout=0.5)
    multi = redlease.MultiLock(client, [a, b], ttl=30)
    first = multi.acquire().fencing_token  # loads the scripts on every node
    multi.release()
    multi._node = After(multi._node, acquire_of(a), node_b.pause)
    try:
        with pytest.raises(LockUnavailable):
            multi.acquire(blocking=False)  # a taken, then b's node stops answering
        assert not lease_of(node_a, a)  # a given back while b's node is still paused
    finally:
        node_b.resume()
    wait_until(lambda: fence_of(node_b.client(), b) > first)  # b's acquire ran after the resume
    wait_until(lambda: no_lease_anywhere(cluster.servers, [a, b]))  # and its undo after it
    client.close()


def test_cluster_node_killed_mid_acquire_leaves_nothing(cluster: LocalCluster) -> None:
    a, b, c = spread("killed", 3)
    node_b = cluster.servers[master_of(b)]
    client = cluster.client(socket_timeout=2)
    multi = redlease.MultiLock(client, [a, b, c], ttl=30)
    multi._node = After(multi._node, acquire_of(a), node_b.kill)
    with pytest.raises(LockUnavailable) as err:
        multi.acquire(timeout=5)
    assert err.value.nodes == (node_b.address,)  # names the node that failed, not the cluster
    assert no_lease_anywhere(cluster.servers, [a, b, c])  # every reachable node
    client.close()


async def test_async_cluster_acquire_cancelled_mid_flight_leaves_nothing(
    cluster: LocalCluster,
) -> None:
    a, b = spread("cancel", 2)
    node_a, node_b = cluster.servers[master_of(a)], cluster.servers[master_of(b)]
    host, port = cluster.startup_nodes[0]
    client = AsyncRedisCluster(host=host, port=port)  # no socket timeout: only cancellation
    multi = aio.MultiLock(client, [a, b], ttl=30)
    first = (await multi.acquire()).fencing_token
    await multi.release()
    paused = asyncio.Event()

    def pause_b() -> None:
        node_b.pause()
        paused.set()

    multi._node = AsyncAfter(multi._node, acquire_of(a), pause_b)
    task = asyncio.create_task(multi.acquire(blocking=False))
    try:
        await paused.wait()  # the task then writes b's acquire and waits for its reply
        task.cancel()
        probe_a = aioredis.Redis(host="127.0.0.1", port=node_a.port)
        await async_wait_until(lambda: _gone(probe_a, a))  # undone while b's node is paused
        await probe_a.aclose()
    finally:
        node_b.resume()
    with pytest.raises(asyncio.CancelledError):
        await task
    wait_until(lambda: fence_of(node_b.client(), b) > first)
    wait_until(lambda: no_lease_anywhere(cluster.servers, [a, b]))
    await client.aclose()


async def _gone(client: Any, name: str) -> bool:
    return not await client.exists(f"redlease:{{{name}}}")
