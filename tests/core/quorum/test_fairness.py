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
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease import LockTimeout, QuorumUnavailable
from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import wait_until
from redlease.quorum import NodeSet

GREEDY = 4
SECTIONS = 5  # contend until every greedy client has had this many critical sections
STARVED = 30.0  # ... which must not take longer than this (a client starved: fail)
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


def contend(
    threads: list[threading.Thread],
    enough: Callable[[], bool],
    stop: threading.Event,
    errors: list[BaseException],
) -> None:
    """Run the client threads until ``enough()`` (or a client failed), then stop them all."""
    for t in threads:
        t.start()
    try:
        wait_until(lambda: enough() or bool(errors), STARVED)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors


@pytest.mark.parametrize("redis_nodes", [3, 5], indirect=True)
def test_greedy_clients_leave_no_registration(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """Greedy blocking clients and one that gives up: every greedy client gets its sections
    (none starves), and no waiter registration is left on any node once they are all gone."""
    stop = threading.Event()
    sections = [0] * GREEDY
    gave_up = [0]
    errors: list[BaseException] = []

    def client(body: object) -> None:
        ns = NodeSet([s.client(socket_timeout=5) for s in redis_nodes])
        try:
            lock = redlease.Lock(ns, lock_name, ttl=5)
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
        # 1 ms: long enough to register as a waiter (the first attempt starts before the
        # deadline), too short to wait for a turn behind the greedy clients. (20 ms gave up
        # only now and then: fair waiting served it in time, and the test starved for a give-up.)
        while not stop.is_set():
            try:
                lock.acquire(timeout=0.001)
            except LockTimeout:
                gave_up[0] += 1
            except QuorumUnavailable:
                # 1 ms can end before a busy machine's first probe of the nodes answers (a
                # node set's channels reconnect): that attempt never registered, nothing to check
                pass
            else:
                lock.release()

    threads = [threading.Thread(target=client, args=(greedy(k),)) for k in range(GREEDY)]
    threads.append(threading.Thread(target=client, args=(impatient,)))
    contend(threads, lambda: min(sections) >= SECTIONS and gave_up[0] >= 1, stop, errors)
    assert_no_registrations(redis_nodes, lock_name)


def test_asyncio_clients_leave_no_registration(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """The same over the asyncio transport: greedy clients, each with its own event loop (in
    its own thread) and node set, so their requests reach the nodes in different orders."""
    stop = threading.Event()
    sections = [0] * GREEDY
    errors: list[BaseException] = []

    async def greedy(k: int) -> None:
        ns = NodeSet([aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes])
        lock = redlease.aio.Lock(ns, lock_name, ttl=5)
        try:
            while not stop.is_set():
                await lock.acquire(timeout=30)
                sections[k] += 1
                await lock.release()
        finally:
            await ns.aclose()
            for c in ns.clients:
                await c.aclose()

    def client(k: int) -> None:
        try:
            asyncio.run(greedy(k))
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(GREEDY)]
    contend(threads, lambda: min(sections) >= SECTIONS, stop, errors)
    assert_no_registrations(redis_nodes, lock_name)
