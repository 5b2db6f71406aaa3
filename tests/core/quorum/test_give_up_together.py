"""Hundreds of threads blocking on one RedLock lock give up together: honest timeouts.

Every thread of one process shares the node set's one connection per node, so when they all
make their attempts at once, each request waits behind the others' on that connection, and the
thread reading the replies competes with hundreds of others for the GIL. Neither wait is the
node's delay: it must never be reported as an outage (``QuorumUnavailable``, "no reply within
the node timeout"), and no thread may give up before its timeout. (Before the queue rule, 300
threads with a 0.05 s node timeout: 19-259 of them failed with ``QuorumUnavailable`` in each of
4 runs; before the reader rule, 2 of 300 in a CI run beside another test file.) The rules
themselves are proven one by one in ``test_transport.py``; the node timeout here stays above
what a server process kept off a busy 2-core machine's CPU can take. The asyncio driver
follows the same rule.
"""

from __future__ import annotations

import asyncio
import threading
import time

import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease.devtools.localredis import RedisServer
from redlease.errors import LockTimeout
from redlease.quorum import NodeSet

THREADS = 300
TIMEOUT = 1.0  # the shared timeout of every waiter
# the per-node timeout: shorter than the time 300 attempts can queue on one connection under
# load, and longer than a real server's scheduling gap on a busy 2-core machine
NODE_TIMEOUT = 0.2
BOUND = 30.0  # generous: every thread has returned by then (a busy 2-core machine)


def test_threads_give_up_together_without_an_outage(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    ns = NodeSet([s.client(socket_timeout=5) for s in redis_nodes], node_timeout=NODE_TIMEOUT)
    try:
        holder = redlease.Lock(ns, lock_name, ttl=60)
        holder.acquire(timeout=10)
        start = threading.Barrier(THREADS)
        outcomes: list[tuple[float, BaseException | None]] = []
        record = threading.Lock()

        def waiter() -> None:
            lock = redlease.Lock(ns, lock_name, ttl=60)
            start.wait(BOUND)
            t0 = time.monotonic()
            error: BaseException | None = None
            try:
                lock.acquire(timeout=TIMEOUT)
            except BaseException as exc:  # noqa: BLE001 - judged by the test thread
                error = exc
            with record:
                outcomes.append((time.monotonic() - t0, error))

        threads = [threading.Thread(target=waiter, daemon=True) for _ in range(THREADS)]
        for t in threads:
            t.start()
        until = time.monotonic() + BOUND
        for t in threads:
            t.join(max(0.0, until - time.monotonic()))
        assert sum(t.is_alive() for t in threads) == 0, f"not returned within {BOUND:g}s"

        assert_honest(outcomes)
        holder.release()
    finally:
        ns.close()


async def test_tasks_give_up_together_without_an_outage(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    clients = [aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes]
    ns = NodeSet(clients, node_timeout=NODE_TIMEOUT)
    try:
        holder = redlease.aio.Lock(ns, lock_name, ttl=60)
        await holder.acquire(timeout=10)

        async def waiter() -> tuple[float, BaseException | None]:
            lock = redlease.aio.Lock(ns, lock_name, ttl=60)
            t0 = time.monotonic()
            try:
                await lock.acquire(timeout=TIMEOUT)
            except BaseException as exc:  # noqa: BLE001 - judged below
                return time.monotonic() - t0, exc
            return time.monotonic() - t0, None

        async with asyncio.timeout(BOUND):
            outcomes = await asyncio.gather(*(waiter() for _ in range(THREADS)))
        assert_honest(outcomes)
        await holder.release()
    finally:
        await ns.aclose()
        for c in clients:
            await c.aclose()


def assert_honest(outcomes: list[tuple[float, BaseException | None]]) -> None:
    """Every waiter timed out (no outage, no other error), none before its timeout."""
    assert len(outcomes) == THREADS
    wrong = [repr(e) for _, e in outcomes if not isinstance(e, LockTimeout)]
    assert not wrong, f"{len(wrong)} of {THREADS} did not time out: {wrong[:3]}"
    early = [elapsed for elapsed, _ in outcomes if elapsed < TIMEOUT]
    assert not early, f"{len(early)} gave up early: {sorted(early)[:3]}"
