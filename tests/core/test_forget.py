"""``forget_after``: a lock's fence counter and history expire a bounded time after its last
lease, and a token issued after the counter was forgotten is still above every earlier one
(docs/safety.md, "Forgotten counters"). Real redis-servers; conditions are polled, not slept on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import redlease
import redlease.aio
from redlease import ConfigError
from redlease.core.keys import LockKeys
from redlease.core.quorum import NodeSet
from redlease.devtools.localredis import RedisServer


def wait_for(cond: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    """Poll ``cond`` until it holds (bounded: a generous deadline for a busy machine)."""
    end = time.monotonic() + deadline
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def clock_us(client: redis.Redis) -> int:
    """The server clock in microseconds."""
    sec, us = client.time()
    return int(sec) * 1_000_000 + int(us)


def test_names_acquired_and_released_leave_a_bounded_number_of_keys(
    redis_server: RedisServer,
) -> None:
    """2,000 names through the library loop with forget_after: right after, each name has its
    fence and history keys (with a TTL); once ttl + forget_after has passed, none is left (the
    keys counted with DBSIZE, polled). Before forget_after every name's two keys stayed."""
    client = redis_server.client()
    names = [f"job-{i}" for i in range(2000)]
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        lock = redlease.Lock(client, name, ttl=0.5, forget_after=2)  # 2.5 s: room for a stall
        first[name] = lock.acquire(blocking=False).fencing_token
        lock.release()
        if i % 100 == 0:  # right after its release (the loop itself outlasts ttl + forget_after)
            keys = LockKeys.for_name(name)
            assert client.exists(keys.fence, keys.history) == 2  # fence + history, for now
            assert 0 < client.pttl(keys.fence) <= 2500 + 5  # ttl + forget_after (+ lead <= 5 ms)
            assert 0 < client.pttl(keys.history) <= 2500
    wait_for(lambda: client.dbsize() <= 2, "the names' keys to expire")
    # a name used again after it was forgotten gets a token above its earlier one
    for name in names[:50]:
        lock = redlease.Lock(client, name, ttl=0.5, forget_after=0.5)
        assert lock.acquire(blocking=False).fencing_token > first[name]
        lock.release()
    client.close()


def test_token_after_a_forgotten_counter_is_greater(any_client: Any, lock_name: str) -> None:
    keys = LockKeys.for_name(lock_name)
    lock = redlease.Lock(any_client, lock_name, ttl=0.2, forget_after=0.2)
    before = lock.acquire().fencing_token
    lock.release()
    wait_for(lambda: any_client.exists(keys.fence, keys.history) == 0, "the counter to expire")
    after = lock.acquire().fencing_token
    assert after > before
    lock.release()


def test_a_counter_ahead_of_the_clock_lives_until_the_clock_passes_it(
    client: redis.Redis, lock_name: str
) -> None:
    """A counter above the server clock (e.g. raised from a node whose clock is ahead) is not
    forgotten before the clock passes its value: its expiry includes the lead."""
    keys = LockKeys.for_name(lock_name)
    ahead = clock_us(client) + 5_000_000  # 5 s ahead of the server clock
    client.set(keys.fence, ahead)
    lock = redlease.Lock(client, lock_name, ttl=0.1, forget_after=0.1)
    token = lock.acquire().fencing_token
    assert token == ahead + 1
    lock.release()
    left_ms = client.pttl(keys.fence)
    assert left_ms >= 4_800, left_ms  # lead (~5 s) + ttl + forget_after, less the time taken
    # the clock is past the counter's value when it expires
    # (server time + PTTL, read in one transaction: PEXPIRETIME is Redis 7's, the matrix runs 6.2)
    pipe = client.pipeline(transaction=True)
    (seconds, micros), pttl_ms = pipe.time().pttl(keys.fence).execute()
    expires_us = seconds * 1_000_000 + micros + pttl_ms * 1000
    assert expires_us > token


def test_extend_and_hand_off_keep_the_keys_with_the_lease(
    client: redis.Redis, lock_name: str
) -> None:
    keys = LockKeys.for_name(lock_name)
    a = redlease.Lock(client, lock_name, ttl=0.5, forget_after=0.5, identity="a")
    b = redlease.Lock(client, lock_name, ttl=5, forget_after=0.5, identity="b")
    first = a.acquire().fencing_token
    a.extend(10)  # the keys now outlive a 10 s lease
    assert client.pttl(keys.fence) > 10_000
    assert client.pttl(keys.history) > 10_000
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(b.acquire(timeout=30).fencing_token))
    waiter.start()
    wait_for(lambda: client.hlen(keys.direct) == 1, "b to enlist for the hand-off")
    client.pexpire(keys.fence, 100)  # as if the counter were about to go: the hand-off renews it
    a.release()  # the release grants the lease to b itself (pass_on)
    waiter.join(30)
    assert got and got[0] > first
    assert 5_000 < client.pttl(keys.fence) <= 5_500 + 5
    assert 5_000 < client.pttl(keys.history) <= 5_500
    b.release()


def test_default_keeps_the_counter_and_history_forever(client: redis.Redis) -> None:
    """DESIGN's rule for library users: without forget_after the counter has no TTL."""
    keys = LockKeys.for_name("forever")
    lock = redlease.Lock(client, "forever", ttl=0.2)
    lock.acquire()
    lock.extend(1)
    lock.release()
    assert client.pttl(keys.fence) == -1
    assert client.pttl(keys.history) == -1


def test_semaphore_and_reentrant_lock_forget(client: redis.Redis) -> None:
    sem = redlease.Semaphore(client, "sem", limit=2, ttl=0.5, forget_after=0.5)
    sem.acquire()
    sem.extend(3)
    assert client.pttl(LockKeys.for_name("sem").fence) > 3000
    sem.release()
    lock = redlease.ReentrantLock(client, "re", ttl=0.5, forget_after=0.5)
    lock.acquire()
    lock.acquire()
    lock.release()
    lock.release()
    assert 0 < client.pttl(LockKeys.for_name("re").fence) <= 1005
    wait_for(lambda: client.dbsize() == 0, "the keys to expire")


async def test_asyncio_lock_forgets(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis(port=redis_server.port)
    try:
        lock = redlease.aio.Lock(client, "aio", ttl=0.5, forget_after=0.5)
        await lock.acquire()
        await lock.release()
        assert 0 < await client.pttl(LockKeys.for_name("aio").fence) <= 1005
    finally:
        await client.aclose()


def test_quorum_forgets_and_tokens_increase(redis_nodes: list[RedisServer]) -> None:
    """A RedLock set: every node's counter and history expire, raised counters included (one
    node's counter ahead makes the others be raised to it), and the next token is greater."""
    clients = [s.client(socket_timeout=5) for s in redis_nodes]
    keys = LockKeys.for_name("q")
    ns = NodeSet(clients)
    try:
        lock = redlease.Lock(ns, "q", ttl=0.3, forget_after=0.3)
        lock.acquire(timeout=10)
        lock.release()
        # node 0's counter ahead of the others: the next grant raises nodes 1 and 2 to it
        clients[0].incrby(keys.fence, 1_000_000)
        token = lock.acquire(timeout=10).fencing_token
        lock.release()
        for c in clients:
            assert int(c.get(keys.fence) or 0) == token
            assert c.pttl(keys.fence) > 0  # raised counters expire too
        wait_for(
            lambda: all(c.exists(keys.fence, keys.history) == 0 for c in clients),
            "every node to forget the counter",
        )
        assert lock.acquire(timeout=10).fencing_token > token
        lock.release()
    finally:
        ns.close()


@pytest.mark.parametrize("bad", [0, -1, True, "60", float("inf")])
def test_forget_after_is_validated(client: redis.Redis, bad: Any) -> None:
    with pytest.raises(ConfigError) as err:
        redlease.Lock(client, "v", forget_after=bad)
    assert err.value.field == "forget_after"


def test_forget_after_only_for_one_exclusive_name(client: redis.Redis) -> None:
    for make in (
        lambda: redlease.MultiLock(client, ["a", "b"], forget_after=1),
        lambda: redlease.ReadWriteLock(client, "rw", forget_after=1),
    ):
        with pytest.raises(ConfigError) as err:
            make()
        assert err.value.field == "forget_after"
