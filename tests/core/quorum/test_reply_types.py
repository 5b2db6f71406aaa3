"""Clients that decode replies to ``str`` (``decode_responses=True``, common in applications)
get the same leases as byte clients: the scripts answer grants as strings and releases as
integers, and the asyncio quorum transport parses replies itself with the client's encoding.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease.devtools.localredis import RedisServer
from redlease.quorum import NodeSet


def decoded(kind: Any, server: RedisServer, nodes: list[RedisServer]) -> tuple[Any, NodeSet]:
    """A decoding client of ``kind`` (``redis.Redis`` or ``redis.asyncio.Redis``) on ``server``,
    and a node set of such clients on ``nodes``."""
    return (
        kind(port=server.port, decode_responses=True),
        NodeSet([kind(port=s.port, decode_responses=True) for s in nodes]),
    )


def test_decoded_clients_single_node_and_quorum(
    redis_server: RedisServer, redis_nodes: list[RedisServer], lock_name: str
) -> None:
    single, nodes = decoded(redis.Redis, redis_server, redis_nodes)
    try:
        for client in (single, nodes):
            lock = redlease.ReentrantLock(client, lock_name, ttl=5)  # owner: this thread
            first = lock.acquire()
            assert lock.acquire().fencing_token == first.fencing_token  # re-entry
            assert lock.count() == 2
            lock.release()
            lock.release()
            again = lock.acquire()
            assert again.fencing_token > first.fencing_token
            state = lock.state()
            assert state.fencing_token == again.fencing_token and state.holder
            assert again.transitions >= 1 and again.acquired_at_ms > 0
            lock.release()
            assert lock.state().holder is None
    finally:
        nodes.close()
        single.close()


async def test_decoded_clients_asyncio(
    redis_server: RedisServer, redis_nodes: list[RedisServer], lock_name: str
) -> None:
    single, nodes = decoded(aioredis.Redis, redis_server, redis_nodes)
    try:
        for client in (single, nodes):
            lock = redlease.aio.Lock(client, lock_name, ttl=5)
            first = await lock.acquire()
            await lock.release()
            second = await lock.acquire()
            assert second.fencing_token > first.fencing_token
            assert (await lock.state()).fencing_token == second.fencing_token
            await lock.release()
    finally:
        await nodes.aclose()
        for c in nodes.clients:
            await c.aclose()
        await single.aclose()
