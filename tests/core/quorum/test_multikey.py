"""Multi-key leases on a RedLock node set of 3 real redis-servers: all or nothing, one fencing
token above every earlier token of each name, waiting by notification, and no part left held
when nodes are paused or killed in the middle of an acquisition."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease import LockContention, LockUnavailable
from redlease.devtools.localredis import RedisServer
from redlease.devtools.multikey import After, acquire_of, fence_of, lease_of
from redlease.devtools.polling import async_wait_until, wait_until
from redlease.quorum import NodeSet


@pytest.fixture
def ns(redis_nodes: list[RedisServer]) -> Iterator[NodeSet]:
    nodes = NodeSet([s.client(socket_timeout=5) for s in redis_nodes])
    yield nodes
    nodes.close()


@pytest.fixture
def pair(lock_name: str) -> tuple[str, str]:
    return f"{lock_name}-a", f"{lock_name}-b"


def holders(servers: list[RedisServer], name: str) -> list[bytes | None]:
    return [lease_of(s, name).get(b"holder") for s in servers if s.alive]


def test_all_or_nothing_and_fencing(
    redis_nodes: list[RedisServer], ns: NodeSet, pair: tuple[str, str]
) -> None:
    a, b = pair
    other = redlease.Lock(ns, b, ttl=30, identity="other")
    for _ in range(3):  # b's counters run ahead of a's
        before = other.acquire()
        other.release()
    other.acquire()
    multi = redlease.MultiLock(ns, [b, a], ttl=30, identity="multi")
    with pytest.raises(LockContention) as err:
        multi.acquire(blocking=False)
    assert err.value.holder == "other"
    assert holders(redis_nodes, a) == [None, None, None]  # a was given back everywhere
    other.release()
    lease = multi.acquire(blocking=False)
    assert lease.fencing_token > before.fencing_token
    for name in (a, b):  # the token is on every name, on every node
        assert {lease_of(s, name).get(b"fence") for s in redis_nodes} == {
            str(lease.fencing_token).encode()
        }
    state = multi.state()
    assert state.holder == "multi" and state.fencing_token == lease.fencing_token
    multi.release()
    after = redlease.Lock(ns, a, ttl=5).acquire()
    assert after.fencing_token > lease.fencing_token  # a's counter was raised on a quorum


def test_waiter_is_woken_by_release(
    redis_nodes: list[RedisServer], ns: NodeSet, pair: tuple[str, str]
) -> None:
    a, b = pair
    holder = redlease.Lock(ns, b, ttl=30)
    holder.acquire()
    multi = redlease.MultiLock(ns, [a, b], ttl=30)
    got_at: list[float] = []

    def wait() -> None:
        multi.acquire(timeout=20)
        got_at.append(time.monotonic())

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: multi.states()[b].waiters >= 1)
    released_at = time.monotonic()
    holder.release()
    t.join(20)
    assert got_at and got_at[0] - released_at < 2.5  # not the 5 s fallback step
    multi.release()


def test_paused_node_mid_acquire_leaves_nothing(
    redis_nodes: list[RedisServer], ns: NodeSet, pair: tuple[str, str]
) -> None:
    a, b = pair
    warm = redlease.MultiLock(ns, [a, b], ttl=30)
    warmed = warm.acquire().fencing_token  # the nodes know the scripts; a's counters hold it
    warm.release()
    other = redlease.Lock(ns, b, ttl=30, identity="other")
    other.acquire()
    paused = redis_nodes[2]
    paused.pause()
    try:
        # a is granted by nodes 0 and 1 (node 2 gets it late), b is refused: a is undone
        with pytest.raises(LockContention):
            redlease.MultiLock(ns, [a, b], ttl=30, identity="multi").acquire(blocking=False)
        assert holders(redis_nodes[:2], a) == [None, None]
    finally:
        paused.resume()
    wait_until(lambda: fence_of(paused.client(), a) > warmed)  # its late acquire of a ran,
    wait_until(lambda: holders(redis_nodes, a) == [None, None, None])  # then the undo
    assert holders(redis_nodes, b) == [b"other"] * 3


def test_nodes_killed_mid_acquire_leave_nothing(
    redis_nodes: list[RedisServer], ns: NodeSet, pair: tuple[str, str]
) -> None:
    a, b = pair
    multi = redlease.MultiLock(ns, [a, b], ttl=30)

    def kill_two() -> None:
        redis_nodes[0].kill()
        redis_nodes[1].kill()

    multi._node = After(multi._node, acquire_of(a), kill_two)  # a is held on all three
    with pytest.raises(LockUnavailable):
        multi.acquire(blocking=False)  # b: no quorum left
    assert holders(redis_nodes, a) == [None] and holders(redis_nodes, b) == [None]


async def test_async_all_or_nothing(redis_nodes: list[RedisServer], pair: tuple[str, str]) -> None:
    a, b = pair
    ns = NodeSet([aioredis.Redis(host="127.0.0.1", port=s.port) for s in redis_nodes])
    other = redlease.aio.Lock(ns, b, ttl=30, identity="other")
    before = await other.acquire()
    multi = redlease.aio.MultiLock(ns, [a, b], ttl=30, identity="multi")
    with pytest.raises(LockContention):
        await multi.acquire(blocking=False)
    assert holders(redis_nodes, a) == [None, None, None]
    task = asyncio.create_task(multi.acquire(timeout=20))

    async def registered() -> bool:
        return (await multi.states())[b].waiters >= 1

    await async_wait_until(registered)
    await other.release()
    lease = await task
    assert lease.fencing_token > before.fencing_token
    assert holders(redis_nodes, a) == [b"multi"] * 3
    await multi.release()
    assert holders(redis_nodes, b) == [None, None, None]
    await ns.aclose()
