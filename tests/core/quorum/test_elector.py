"""The public elector over a RedLock node set of 3 with one node killed: a majority still
elects, the standby hears who leads, and a stopped leader's lease goes to the standby."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.devtools.localredis import RedisServer
from redlease.quorum import NodeSet
from tests.core.test_elector import SLOW, Record


def nodeset(servers: list[RedisServer]) -> NodeSet:
    """A node set that has met every node (a set is marked once every node answered)."""
    ns = NodeSet([s.client(socket_timeout=5) for s in servers])
    lock = redlease.Lock(ns, "meet", ttl=5)
    lock.acquire(blocking=False)
    lock.release()
    return ns


def test_a_node_set_with_one_node_down_still_elects(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    first, second = Record(), Record()
    sets = [nodeset(redis_nodes), nodeset(redis_nodes)]
    redis_nodes[2].kill()
    a = redlease.Elector(sets[0], lock_name, identity="a", **SLOW, **first.callbacks())
    b = redlease.Elector(sets[1], lock_name, identity="b", **SLOW, **second.callbacks())
    try:
        with a:
            _, lease, _ = first.next("started")
            b.start()
            assert second.next()[:2] == ("leader", "a")
            assert a.leading and not b.leading
            stopped_at = time.monotonic()
        assert first.next()[:2] == ("stopped", redlease.Elector.STOPPED)
        _, new_lease, at = second.next("started")
        assert at - stopped_at < SLOW["ttl"] / 2  # woken by the release, not by the TTL
        assert new_lease.fencing_token > lease.fencing_token and b.leading
    finally:
        b.stop()
        for ns in sets:
            ns.close()


async def test_a_node_set_elects_asyncio(redis_nodes: list[RedisServer], lock_name: str) -> None:
    rec = Record()
    clients = [aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes]
    ns = NodeSet(clients)
    try:
        meet = aio.Lock(ns, "meet", ttl=5)  # a set is marked once every node answered
        await meet.acquire(blocking=False)
        await meet.release()
        redis_nodes[0].kill()
        async with aio.Elector(ns, lock_name, identity="a", **SLOW, **rec.callbacks()) as e:
            assert (await rec.anext())[:2] == ("leader", "a")
            _, lease, _ = await rec.anext("started")
            assert e.leading and e.lease is lease
        assert (await rec.anext())[:2] == ("stopped", aio.Elector.STOPPED)
    finally:
        await ns.aclose()
