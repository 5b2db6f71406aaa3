"""A waiter that gave up (LockTimeout) is gone for good: no release hands it the lease.

The listener of a lock's waiters gives up for those whose deadlines pass (core/waiting.py).
Whatever the waiter's process would still have to send after raising LockTimeout may never go
out: the caller closes its client at once, its event loop ends, the process exits. So when
LockTimeout is raised the waiter must be off the queue and out of the direct hand-off already,
or a release would grant the lease to a waiter that left, and nobody could take the lock until
that lease's TTL ran out (a stranded lease). Here the waiters' process exits right after the
last LockTimeout; the TTL is 30 s and the registrations outlive the release
(``registration_grace``): a strand cannot go unnoticed.
"""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer

from .test_processes import spawn

TTL = 30.0
PROMPT = 5.0  # a third acquirer gets the lock within this: far below the TTL of a strand


def _quit(server: RedisServer, lock_name: str, n: int, flavor: str) -> None:
    """``n`` waiters of another process time out on ``lock_name``; it exits at once after."""
    proc = spawn("quit", str(server.port), lock_name, str(n), flavor)
    out, _ = proc.communicate(timeout=60)
    assert out.split() == ["timed-out"] and proc.returncode == 0


def _queued(server: RedisServer, lock_name: str) -> int:
    """Registrations and enlistments left for ``lock_name``."""
    keys = LockKeys.for_name(lock_name)
    with server.client() as observer:
        return int(observer.zcard(keys.waiters)) + int(observer.hlen(keys.direct))


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("flavor", ["asyncio", "threads"])
def test_a_released_lease_never_goes_to_a_waiter_that_gave_up(
    redis_server: RedisServer, lock_name: str, n: int, flavor: str
) -> None:
    client = redis_server.client()
    holder = redlease.Lock(client, lock_name, ttl=TTL, identity="holder")
    try:
        holder.acquire()
        _quit(redis_server, lock_name, n, flavor)
        assert _queued(redis_server, lock_name) == 0  # off the queue before LockTimeout
        holder.release()
        third = redlease.Lock(client, lock_name, ttl=TTL, identity="third")
        start = time.monotonic()
        third.acquire(timeout=PROMPT)  # LockTimeout if the lease went to a waiter that left
        assert time.monotonic() - start < PROMPT
        state = third.state()
        assert state.holder == "third" and state.waiters == 0
        third.release()
    finally:
        client.close()


async def test_a_released_lease_never_goes_to_an_asyncio_waiter_that_gave_up(
    redis_server: RedisServer, lock_name: str
) -> None:
    """The same with an asyncio holder and third acquirer."""
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    holder = aio.Lock(client, lock_name, ttl=TTL, identity="holder")
    try:
        await holder.acquire()
        _quit(redis_server, lock_name, 3, "asyncio")
        await holder.release()
        third = aio.Lock(client, lock_name, ttl=TTL, identity="third")
        start = time.monotonic()
        await third.acquire(timeout=PROMPT)
        assert time.monotonic() - start < PROMPT
        state = await third.state()
        assert state.holder == "third" and state.waiters == 0
        await third.release()
    finally:
        await client.aclose()
