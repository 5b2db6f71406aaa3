"""Quorum fairness: no waiter registration outlives an acquire; greedy clients all get turns.

Several clients, each with a node set of its own (as separate processes would have), compete
for one lock on 3 or 5 real redis-servers. A blocking acquire registers as a waiter on every
node that refuses it, for its whole wait step (5 s by default) plus a grace: once it is granted
on a quorum, or gives up, those registrations must go at once, else each release on such a node
reserves the lock for a waiter that is not waiting.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease import LockTimeout
from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.quorum import NodeSet
from tests.core.util import wait_until

GREEDY = 4
WINDOW = 1.0  # seconds of contention
# A leftover registration lives >= 5 s (the default wait step plus the grace): gone within this
# much after the clients exit means the clients removed it, not that it lapsed.
CLEAN_WITHIN = 2.0


def registrations(servers: list[RedisServer], name: str) -> list[int]:
    """Members of the lock's waiter zset on each node, lapsed ones included."""
    key = LockKeys.for_name(name).waiters
    counts = []
    for s in servers:
        c = s.client()
        try:
            counts.append(int(c.zcard(key)))  # type: ignore[arg-type]
        finally:
            c.close()
    return counts


def assert_no_registrations(servers: list[RedisServer], name: str) -> None:
    seen: list[int] = []

    def clean() -> bool:
        seen[:] = registrations(servers, name)
        return not any(seen)

    try:
        wait_until(clean, timeout=CLEAN_WITHIN)
    except AssertionError:
        raise AssertionError(f"waiter registrations left per node: {seen}") from None


@pytest.mark.parametrize("redis_nodes", [3, 5], indirect=True)
def test_greedy_clients_leave_no_registration(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """Greedy blocking clients and one that gives up: every greedy client gets sections, and
    no waiter registration is left on any node once they are all gone."""
    start = threading.Event()
    stop = threading.Event()
    sections = [0] * GREEDY
    gave_up = [0]
    errors: list[BaseException] = []

    def client(body: object) -> None:
        ns = NodeSet([s.client(socket_timeout=5) for s in redis_nodes])
        try:
            lock = redlease.Lock(ns, lock_name, ttl=5)
            start.wait()
            body(lock)  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            ns.close()

    def greedy(k: int) -> object:
        def body(lock: redlease.Lock) -> None:
            while not stop.is_set():
                lock.acquire(timeout=30)
                sections[k] += 1
                lock.release()

        return body

    def impatient(lock: redlease.Lock) -> None:
        while not stop.is_set():
            try:
                lock.acquire(timeout=0.02)
            except LockTimeout:
                gave_up[0] += 1
            else:
                lock.release()

    threads = [threading.Thread(target=client, args=(greedy(k),)) for k in range(GREEDY)]
    threads.append(threading.Thread(target=client, args=(impatient,)))
    for t in threads:
        t.start()
    start.set()
    time.sleep(WINDOW)  # the contention window itself is what is measured, not a sync point
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert min(sections) >= 1, f"a greedy client never got the lock: {sections}"
    assert_no_registrations(redis_nodes, lock_name)


async def test_asyncio_clients_leave_no_registration(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """The same over the asyncio transport: greedy tasks, each with its own node set."""
    stop = asyncio.Event()
    sections = [0] * GREEDY

    async def greedy(k: int) -> None:
        ns = NodeSet([aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes])
        lock = redlease.aio.Lock(ns, lock_name, ttl=5)
        try:
            while not stop.is_set():
                await lock.acquire(timeout=30)
                sections[k] += 1
                await asyncio.sleep(0)  # let the others run while holding
                await lock.release()
        finally:
            await ns.aclose()
            for c in ns.clients:
                await c.aclose()

    tasks = [asyncio.create_task(greedy(k)) for k in range(GREEDY)]
    await asyncio.sleep(WINDOW)  # the contention window itself, not a sync point
    stop.set()
    async with asyncio.timeout(60):
        await asyncio.gather(*tasks)
    assert min(sections) >= 1, f"a greedy client never got the lock: {sections}"
    await asyncio.to_thread(assert_no_registrations, redis_nodes, lock_name)
