"""RedLock waiters of one lock in one process whose deadlines pass together are given up for
together: one quorum read of the lease for the batch, one write of their LEAVEs per node.

Each waiter used to make its own last attempt at its deadline (a fan-out of the acquire script
to every node, then one of LEAVE): 1,000 threads cost about 2 s of client CPU and gave up
0.6-1.1 s late. Now their listener reads the lease's owner on every node once, and each waiter
the lease was held against by a quorum (the lock view's rule) is refused as its own last
attempt would have been at that instant. A free lease, one held (on any node) by the waiter
itself, no quorum, or a lone waiter still means its own last attempt. How late they give up is
measured by ``python -m bench.quorum_waiters``; here only generous bounds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease.core import flows, waiting
from redlease.core.keys import LockKeys
from redlease.core.requests import Call, GaveUp, Wait
from redlease.core.scripts import GIVE_UP
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until, wait_until
from redlease.errors import LockTimeout
from redlease.quorum import NodeSet

from .conftest import lease_keys

WAITERS = 200
TIMEOUT = 2.0  # long enough for every first attempt to be answered before the deadlines
SLACK = 10.0  # how late a give-up may be here (a busy 2-core machine); the bench measures it
BOUND = 60.0  # every waiter has returned by then


@pytest.fixture
def last_attempts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per attempt a blocking acquirer makes without a registration: the last
    attempt of a waiter whose deadline passed."""
    seen: list[int] = []
    registration = flows._registration

    def counted(prim: Any, pacing: Any, state: Any) -> int:
        wait_ms = registration(prim, pacing, state)
        if pacing.blocking and not wait_ms:
            seen.append(1)
        return wait_ms

    monkeypatch.setattr(flows, "_registration", counted)
    return seen


def registrations(servers: list[RedisServer], name: str) -> list[int]:
    """The waiters still registered for ``name`` on each node."""
    counts = []
    for s in servers:
        with s.client() as c:
            counts.append(int(c.zcard(LockKeys.for_name(name).waiters)))
    return counts


def assert_given_up_together(
    outcomes: list[tuple[float, BaseException | None]], last_attempts: list[int]
) -> None:
    """Every waiter timed out, naming the holder, none before its timeout and none absurdly
    late; most were given up for by their listener, not by a last attempt of their own."""
    assert len(outcomes) == WAITERS
    wrong = [repr(e) for _, e in outcomes if not isinstance(e, LockTimeout)]
    assert not wrong, f"{len(wrong)} of {WAITERS} did not time out: {wrong[:3]}"
    assert {getattr(e, "holder", None) for _, e in outcomes} == {"holder"}
    elapsed = sorted(t for t, _ in outcomes)
    assert elapsed[0] >= TIMEOUT, f"gave up early: {elapsed[:3]}"
    assert elapsed[-1] < TIMEOUT + SLACK
    # before: one last attempt per waiter (WAITERS of them)
    assert len(last_attempts) < WAITERS // 2, f"{len(last_attempts)} last attempts"


def test_threads_due_together_are_given_up_together(
    redis_nodes: list[RedisServer], lock_name: str, last_attempts: list[int]
) -> None:
    ns = NodeSet([s.client(socket_timeout=5) for s in redis_nodes])
    try:
        holder = redlease.Lock(ns, lock_name, ttl=60, identity="holder")
        holder.acquire(timeout=10)
        start = threading.Barrier(WAITERS)
        outcomes: list[tuple[float, BaseException | None]] = []
        record = threading.Lock()

        def waiter() -> None:
            lock = redlease.Lock(ns, lock_name, ttl=60, identity="waiter")
            start.wait(BOUND)
            t0 = time.monotonic()
            error: BaseException | None = None
            try:
                lock.acquire(timeout=TIMEOUT)
            except BaseException as exc:  # noqa: BLE001 - judged by the test thread
                error = exc
            with record:
                outcomes.append((time.monotonic() - t0, error))

        threads = [threading.Thread(target=waiter, daemon=True) for _ in range(WAITERS)]
        for t in threads:
            t.start()
        until = time.monotonic() + BOUND
        for t in threads:
            t.join(max(0.0, until - time.monotonic()))
        assert sum(t.is_alive() for t in threads) == 0, f"not returned within {BOUND:g}s"
        assert_given_up_together(outcomes, last_attempts)
        # their LEAVEs are sent without waiting for the replies: soon, none is registered
        wait_until(lambda: registrations(redis_nodes, lock_name) == [0] * len(redis_nodes), 15)
        holder.release()
    finally:
        ns.close()


async def test_tasks_due_together_are_given_up_together(
    redis_nodes: list[RedisServer], lock_name: str, last_attempts: list[int]
) -> None:
    clients = [aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes]
    ns = NodeSet(clients)
    try:
        holder = redlease.aio.Lock(ns, lock_name, ttl=60, identity="holder")
        await holder.acquire(timeout=10)

        async def waiter() -> tuple[float, BaseException | None]:
            lock = redlease.aio.Lock(ns, lock_name, ttl=60, identity="waiter")
            t0 = time.monotonic()
            try:
                await lock.acquire(timeout=TIMEOUT)
            except BaseException as exc:  # noqa: BLE001 - judged below
                return time.monotonic() - t0, exc
            return time.monotonic() - t0, None

        async with asyncio.timeout(BOUND):
            outcomes = await asyncio.gather(*(waiter() for _ in range(WAITERS)))
        assert_given_up_together(outcomes, last_attempts)

        async def none_registered() -> bool:
            left = await asyncio.to_thread(registrations, redis_nodes, lock_name)
            return left == [0] * len(redis_nodes)

        await async_wait_until(none_registered, 15)
        await holder.release()
    finally:
        await ns.aclose()
        for c in clients:
            await c.aclose()


RACERS = 50


def test_a_release_at_the_deadlines_strands_nothing(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """The holder lets go just before the waiters' deadlines, among their give-ups: each
    waiter either gets the lock (and releases it) or times out, never early; a waiter told
    LockTimeout while it held a quorum would strand its lease. Afterwards no node holds a
    lease or a registration, and the lock is free."""
    ns = NodeSet([s.client(socket_timeout=5) for s in redis_nodes])
    try:
        holder = redlease.Lock(ns, lock_name, ttl=60, identity="holder")
        holder.acquire(timeout=10)
        starts: list[float] = []
        outcomes: list[tuple[float, BaseException | None]] = []
        record = threading.Lock()

        def waiter() -> None:
            lock = redlease.Lock(ns, lock_name, ttl=60, identity="waiter")
            with record:
                starts.append(time.monotonic())
            t0 = starts[-1]
            error: BaseException | None = None
            try:
                lock.acquire(timeout=TIMEOUT)
            except BaseException as exc:  # noqa: BLE001 - judged by the test thread
                error = exc
            else:
                lock.release()
            with record:
                outcomes.append((time.monotonic() - t0, error))

        threads = [threading.Thread(target=waiter, daemon=True) for _ in range(RACERS)]
        for t in threads:
            t.start()
        wait_until(lambda: min(registrations(redis_nodes, lock_name)) == RACERS, 30)
        time.sleep(max(0.0, min(starts) + TIMEOUT - 0.02 - time.monotonic()))
        holder.release()
        until = time.monotonic() + BOUND
        for t in threads:
            t.join(max(0.0, until - time.monotonic()))
        assert sum(t.is_alive() for t in threads) == 0, f"not returned within {BOUND:g}s"
        wrong = [repr(e) for _, e in outcomes if e is not None and not isinstance(e, LockTimeout)]
        assert not wrong, wrong[:3]
        early = [t for t, e in outcomes if e is not None and t < TIMEOUT]
        assert not early, f"gave up early: {early[:3]}"
        wait_until(lambda: registrations(redis_nodes, lock_name) == [0] * len(redis_nodes), 15)
        assert all(not lease_keys(s, lock_name) for s in redis_nodes)
        probe = redlease.Lock(ns, lock_name, ttl=5)
        probe.acquire(blocking=False)  # LockContention if a lease were stranded
        probe.release()
    finally:
        ns.close()


def _final(owner: str) -> Wait:
    give_up = Call(GIVE_UP, ("k",), (250, owner), owner)
    return Wait(("k:wake",), 1.0, "", owner, "k", give_up)


def test_the_quorum_read_names_a_holder_only_when_a_quorum_agrees() -> None:
    """The pure part: the nodes' ``HMGET owner holder fence`` replies, by the lock view's quorum
    rule. A waiter whose own token a node names is never given up for (it may hold the lease)."""
    held = [b"tok-h", b"holder", b"7"]
    mine = [b"tok-a", b"waiter", b"8"]
    free = [None, None, None]
    lease = waiting.quorum_owner("k", [held, held, mine], 2, 0)
    assert lease == waiting.LeaseOwner(frozenset({"tok-h", "tok-a"}), "holder")
    assert waiting.quorum_owner("k", [held, mine, free], 2, 0) is None  # a split
    assert waiting.quorum_owner("k", [held], 2, 2) is None  # too few answered
    assert waiting.quorum_owner("k", [free, free, held], 2, 0) is None  # free by the quorum
    # the same holder identity under two tokens (two leases) is no agreement
    assert waiting.quorum_owner("k", [held, [b"tok-x", b"holder", b"9"], free], 2, 0) is None

    waiters = waiting.WaitList(("k:wake",))
    a = waiters.join(_final("tok-a"), 0.0)
    b = waiters.join(_final("tok-b"), 0.0)
    batch = waiters.due(1.0)
    assert batch == [a, b] and waiters.together(batch, 1.0)
    assert waiters.settle(batch, lease) == [a, b]
    assert a.reply is False  # a node names its token: its own last attempt
    assert b.reply == GaveUp("holder")


def test_a_waiter_due_just_before_others_is_given_up_for_with_them() -> None:
    """Deadlines passing a fraction of a millisecond apart: the first one due is not alone (it
    goes with the read that the next ones share); a waiter with nobody due soon after is."""
    waiters = waiting.WaitList(("k:wake",))
    first = waiters.join(_final("tok-a"), 0.0)  # due at 1.0
    soon = waiters.join(_final("tok-b"), waiting.TOGETHER_WITHIN / 2)
    late = waiters.join(_final("tok-c"), 1.0)  # due at 2.0
    assert waiters.due(1.0) == [first] and waiters.together([first], 1.0)
    assert waiters.due(1.0 + waiting.TOGETHER_WITHIN) == [first, soon]
    waiters.settle([first, soon], None)
    assert waiters.due(2.0) == [late] and not waiters.together([late], 2.0)
