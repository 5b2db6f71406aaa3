"""The counting semaphore on a RedLock node set of three real redis-servers, sync and asyncio:
limit 1 is the mutex, limit 2 needs all three nodes (rules.semaphore_quorum), so three holders
never each hold a quorum of slots; nodes may grant different slots to one holder."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease import LockContention, NotOwned, QuorumUnavailable
from redlease.core.keys import LockKeys
from redlease.core.rules import MAX_HOLDERS, majority, semaphore_quorum
from redlease.core.state import Holder, LockState
from redlease.core.view import lock_view
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until, wait_until
from redlease.quorum import NodeSet


def nodeset(servers: list[RedisServer], **kwargs: object) -> NodeSet:
    return NodeSet([s.client(socket_timeout=5) for s in servers], **kwargs)  # type: ignore[arg-type]


def test_the_quorum_rule_arithmetic() -> None:
    """q = floor(N*M/(N+1)) + 1 is the least quorum with (N+1)*q > N*M: N+1 holders, each on q
    nodes, need more slots than M nodes of N slots have; one less would fit them."""
    for m in range(1, 10):
        for n in range(1, MAX_HOLDERS + 1):
            q = semaphore_quorum(m, majority(m), n)
            assert majority(m) <= q <= m
            assert (n + 1) * q > n * m
            if q - 1 >= majority(m):
                assert (n + 1) * (q - 1) <= n * m
    assert semaphore_quorum(3, 2, 1) == 2  # the mutex: the majority
    assert semaphore_quorum(3, 2, 2) == 3  # the example: A{1,2} B{2,3} C{1,3} must not happen
    assert semaphore_quorum(5, 3, 2) == 4
    assert semaphore_quorum(5, 5, 2) == 5  # never below the configured quorum


def test_limit_one_on_three_nodes_is_the_mutex(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    ns = nodeset(redis_nodes, node_timeout=0.5)
    a = redlease.Semaphore(ns, lock_name, limit=1, ttl=10)
    b = redlease.Lock(ns, lock_name, ttl=10)
    first = a.acquire()
    with pytest.raises(LockContention):
        b.acquire(blocking=False)
    a.release()
    redis_nodes[0].kill()  # a majority (2 of 3) still grants a mutex
    second = b.acquire(blocking=False)
    assert second.fencing_token > first.fencing_token
    b.release()


def test_limit_two_on_three_nodes(redis_nodes: list[RedisServer], lock_name: str) -> None:
    ns = nodeset(redis_nodes, node_timeout=0.5)
    sems = [redlease.Semaphore(ns, lock_name, limit=2, ttl=10, identity=f"h{i}") for i in range(3)]
    tokens = [sems[0].acquire().fencing_token, sems[1].acquire().fencing_token]
    assert tokens[1] > tokens[0]
    with pytest.raises(LockContention):
        sems[2].acquire(blocking=False)
    state = sems[0].state()
    assert [(h.identity, h.fencing_token) for h in state.holders] == [
        ("h0", tokens[0]),
        ("h1", tokens[1]),
    ]
    sems[0].extend()
    sems[1].extend()

    got: dict[str, float] = {}

    def wait() -> None:
        start = time.monotonic()
        got["token"] = sems[2].acquire(timeout=20).fencing_token
        got["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: sems[1].state().waiters >= 1, timeout=10)
    sems[0].release()
    t.join(25)
    assert got["elapsed"] < 9  # woken by the release, before the timeout and the TTL
    assert got["token"] > tokens[1]
    sems[1].release()
    sems[2].release()
    assert sems[0].state().holders == ()


def test_nodes_may_grant_different_slots(redis_nodes: list[RedisServer], lock_name: str) -> None:
    """A stray lease in slot 0 of one node only: the holder gets slot 1 there and slot 0 on the
    others; extend, state and release find its lease by its owner token on every node."""
    keys = LockKeys.for_name(lock_name)
    stray = redis_nodes[0].client()
    stray.hset(keys.lease, mapping={"owner": "x", "holder": "stray", "fence": 1, "ttl_ms": 60000})
    stray.pexpire(keys.lease, 60000)
    ns = nodeset(redis_nodes, node_timeout=0.5)
    sem = redlease.Semaphore(ns, lock_name, limit=2, ttl=10, identity="me")
    lease = sem.acquire(blocking=False)
    assert stray.hget(keys.slot(1), "holder") == b"me"
    for node in redis_nodes[1:]:
        assert node.client().hget(keys.lease, "holder") == b"me"
    # the token was raised into every record, wherever the slot
    assert int(stray.hget(keys.slot(1), "fence")) == lease.fencing_token
    sem.extend()
    assert [h.identity for h in sem.state().holders] == ["me"]  # 'stray' is on one node only
    sem.release()
    assert not stray.exists(keys.slot(1))
    with pytest.raises(NotOwned):
        sem.release()


def test_limit_two_with_a_node_down_is_an_outage(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """With q = 2 of 3 three holders could each hold two nodes' slots (A{1,2} B{2,3} C{1,3});
    limit 2 on 3 nodes needs all 3: with one killed, acquiring fails fast as an outage that
    names the rule, not as contention."""
    ns = nodeset(redis_nodes, node_timeout=0.3)
    sem = redlease.Semaphore(ns, lock_name, limit=2, ttl=5)
    sem.acquire()
    sem.release()
    redis_nodes[2].kill()
    start = time.monotonic()
    with pytest.raises(QuorumUnavailable) as info:
        sem.acquire(timeout=5)
    assert time.monotonic() - start < 3
    text = str(info.value)
    assert "quorum of 3/3" in text and "limit 2 on 3 nodes needs 3" in text
    assert redis_nodes[2].address in info.value.nodes
    # the mutex on the same node set still has its majority
    lock = redlease.Lock(ns, lock_name + "m", ttl=5)
    lock.acquire(blocking=False)
    lock.release()


async def test_async_limit_two_on_three_nodes(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    clients = [aioredis.Redis(host="127.0.0.1", port=s.port) for s in redis_nodes]
    ns = NodeSet(clients, node_timeout=0.5)  # type: ignore[arg-type]
    try:
        sems = [
            redlease.aio.Semaphore(ns, lock_name, limit=2, ttl=10, identity=f"a{i}")
            for i in range(3)
        ]
        first = await sems[0].acquire()
        second = await sems[1].acquire()
        assert second.fencing_token > first.fencing_token
        with pytest.raises(LockContention):
            await sems[2].acquire(blocking=False)
        start = time.monotonic()
        waiter = asyncio.create_task(sems[2].acquire(timeout=20))

        async def registered() -> bool:
            return (await sems[0].state()).waiters >= 1

        await async_wait_until(registered, timeout=10)
        await sems[1].release()
        third = await asyncio.wait_for(waiter, 25)
        assert time.monotonic() - start < 9
        assert third.fencing_token > second.fencing_token
        await sems[0].extend()
        assert {h.identity for h in (await sems[0].state()).holders} == {"a0", "a2"}
        await sems[0].release()
        await sems[2].release()
    finally:
        await ns.aclose()
        for c in clients:
            await c.aclose()


def test_the_view_lists_a_holder_only_where_a_quorum_agrees() -> None:
    def node(*holders: tuple[str, int, int]) -> LockState:
        return LockState(name="s", now_ms=0, holders=tuple(Holder(*h) for h in holders))

    states = [
        node(("a", 1, 900), ("b", 2, 500)),
        node(("b", 2, 400), ("a", 1, 800)),  # other slots, same holders
        node(("c", 3, 900)),  # c on one node only
    ]
    view = lock_view(["s"], {f"n{i}": {"s": s} for i, s in enumerate(states)}, 2)
    # each expiry: when the holder stops being on a quorum of nodes
    assert view.holders == (Holder("a", 1, 800), Holder("b", 2, 400))
