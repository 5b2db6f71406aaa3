"""Behaviour of the asyncio API (single server and cluster), ownership and cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import pytest
import redis.asyncio as aioredis

from redlease import LeaseLost, LockContention, LockTimeout, NotOwned, aio
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until


async def test_acquire_release_fencing(any_aclient: Any, lock_name: str) -> None:
    a = aio.Lock(any_aclient, lock_name, ttl=5, identity="a")
    b = aio.Lock(any_aclient, lock_name, ttl=5, identity="b")
    first = await a.acquire()
    with pytest.raises(LockContention):
        await b.acquire(blocking=False)
    waiter = asyncio.create_task(b.acquire(timeout=5))
    await async_wait_until(lambda: _waiters(a, 1))
    await a.release()
    second = await waiter
    assert second.fencing_token > first.fencing_token
    assert (await b.state()).holder == "b"
    with pytest.raises(NotOwned):
        await a.release()
    await b.release()


async def _waiters(lock: aio.Lock, n: int) -> bool:
    return (await lock.state()).waiters == n


async def test_honest_timeout(any_aclient: Any, lock_name: str) -> None:
    await aio.Lock(any_aclient, lock_name, ttl=30).acquire()
    start = time.monotonic()
    with pytest.raises(LockTimeout):
        await aio.Lock(any_aclient, lock_name).acquire(timeout=0.2)
    elapsed = time.monotonic() - start
    # never early; the overshoot's size is measured by `make bench`, not here: the bound only
    # catches a waiter that slept a whole fallback step past its timeout
    assert 0.2 <= elapsed < 0.2 + 2.0


async def test_reentrant_owner_is_the_task(any_aclient: Any, lock_name: str) -> None:
    lock = aio.ReentrantLock(any_aclient, lock_name)
    await lock.acquire()
    await lock.acquire()
    assert lock.count() == 2

    async def other_task() -> None:
        await lock.acquire(blocking=False)

    with pytest.raises(LockContention):
        await asyncio.create_task(other_task())
    await lock.release()
    await lock.release()
    assert (await lock.state()).holder is None


async def test_read_write(any_aclient: Any, lock_name: str) -> None:
    rw = aio.ReadWriteLock(any_aclient, lock_name, ttl=5)
    r1, r2 = rw.reader(), rw.reader()
    await r1.acquire()
    await r2.acquire()
    w = rw.writer()
    writer = asyncio.create_task(w.acquire(timeout=5))
    await async_wait_until(lambda: _waiters(r1, 1))
    with pytest.raises(LockContention):  # the waiting writer blocks new readers
        await rw.reader().acquire(blocking=False)
    await r1.release()
    await r2.release()
    lease = await writer
    assert lease.fencing_token > 0
    await w.release()


async def test_cancelled_wait_leaves_no_registration(any_aclient: Any, lock_name: str) -> None:
    holder = aio.Lock(any_aclient, lock_name, ttl=30)
    await holder.acquire()
    task = asyncio.create_task(aio.Lock(any_aclient, lock_name).acquire(timeout=20))
    await async_wait_until(lambda: _waiters(holder, 1))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    state = await holder.state()
    assert state.waiters == 0 and state.holder is not None


async def cancel_while_paused(server: RedisServer, operation: Coroutine[Any, Any, Any]) -> None:
    """Start ``operation`` while ``server`` is SIGSTOPped, cancel it mid-flight, resume the
    server and check the cancellation propagates (after any clean-up the operation does)."""
    server.pause()
    try:
        task = asyncio.create_task(operation)
        await asyncio.sleep(0.05)  # timing does not matter: the outcome must be the same
        assert not task.done()
        task.cancel()
    finally:
        server.resume()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelled_in_flight_acquire_leaves_no_lease(redis_server: RedisServer) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    lock = aio.Lock(client, "inflight", ttl=30)
    await lock.state()  # connect and load scripts first
    await cancel_while_paused(redis_server, lock.acquire(timeout=10))
    assert (await lock.state()).holder is None
    await client.aclose()


async def test_cancelled_release_still_releases(redis_server: RedisServer) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    lock = aio.Lock(client, "rel", ttl=30)
    await lock.acquire()
    await cancel_while_paused(redis_server, lock.release())
    assert (await lock.state()).holder is None
    await client.aclose()


async def test_hold_renews_and_loss_cancels_the_guarded_block(
    any_aclient: Any, lock_name: str
) -> None:
    # a TTL that leaves a renewal 0.6 s of slack on a busy machine (ttl 0.3 once lost leases there)
    lock = aio.Lock(any_aclient, lock_name, ttl=1.0)
    async with lock.hold() as lease:
        await asyncio.sleep(1.6)  # past the TTL: only renewal keeps it
        assert lease.valid and (await lock.state()).holder is not None
    lost: list[LeaseLost] = []
    with pytest.raises(LeaseLost):
        async with lock.hold(on_lost=lost.append) as lease:
            await any_aclient.delete(lock.keys.lease)  # force-released behind our back
            await asyncio.sleep(10)  # cancelled by the renewer long before this ends
    assert lost and not lease.valid


async def test_reentrant_hold_renews_for_the_calling_task(any_aclient: Any, lock_name: str) -> None:
    lock = aio.ReentrantLock(any_aclient, lock_name, ttl=1.0)
    async with lock.hold() as lease:
        await asyncio.sleep(1.6)  # past the TTL: only renewal (for this task) keeps it
        assert lease.valid
        assert (await lock.state()).holder is not None
    assert (await lock.state()).holder is None
