"""Many waiters on one lock in one process share one wake-up path.

With a default client, hundreds of blocked acquirers must all get the lock in turn, none fails
as an outage, and the connections the process holds stay bounded by the lock, not by the
number of waiters (counted by the server, CLIENT LIST). A client-side limit (an exhausted
pool) is its own error, never "cannot reach Redis". Timeouts stay honest with many waiters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core import gate, waiting
from redlease.core.keys import LockKeys
from redlease.core.primitives import give_up_together
from redlease.core.replies import as_str
from redlease.core.requests import Call, GaveUp, Wait
from redlease.core.scripts import GIVE_UP
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until, wait_until

from .test_handoff import Counting

# one listener per lock, plus the requests the process may have in flight to the node
BOUND = gate.GATE + 1


def _connections(observer: redis.Redis) -> int:
    """Client connections on the server, the observer's own excluded."""
    return len(observer.client_list()) - 1


def _blocked(observer: redis.Redis) -> int:
    """Connections blocked in a BLPOP now (flag ``b``)."""
    return sum(1 for c in observer.client_list() if "b" in c.get("flags", ""))


def _until(check: Any) -> Any:
    """An async predicate for ``async_wait_until`` from a blocking one (the observer's)."""

    async def predicate() -> bool:
        return bool(check())

    return predicate


# --- the pure routing ----------------------------------------------------------------------------


def test_grants_go_to_their_owner_and_wake_tokens_to_the_first_waiter() -> None:
    box, wake = "k:wake:@box", "k:wake"
    waiters = waiting.WaitList((box, wake), box)
    a = waiters.join(Wait((box, wake), 1.0, box, "tok-a"), 0.0)
    b = waiters.join(Wait((box, wake), 2.0, box, "tok-b"), 0.0)
    c = waiters.join(Wait((box, wake), 3.0, box, "tok-c"), 0.0)
    assert waiters.listen_timeout(0.0) == min(waiting.LISTEN_STEP, 3.0 + waiting.LISTEN_SLACK)

    served = waiters.route([box.encode(), b"7 1000 3 tok-b"])
    assert served is b and b.reply == "7 1000 3"
    assert waiters.route([wake, "1"]) is a and a.reply is True  # first come, first woken
    assert waiters.route([box, "8 1001 4 tok-gone"]) is None  # gave up: Redis passes it on
    assert waiters.leave(c) is True and waiters.leave(a) is False
    assert len(waiters) == 0 and waiters.route([wake, "1"]) is None


def test_a_failed_listener_hands_its_error_to_every_waiter() -> None:
    waiters = waiting.WaitList(("w",))
    joined = [waiters.join(Wait(("w",), 1.0), 0.0) for _ in range(3)]
    error = RuntimeError("down")
    assert waiters.fail(error) == joined
    assert all(w.error is error and w.done for w in joined) and len(waiters) == 0


def test_waiters_due_together_are_told_what_their_last_attempt_would_be() -> None:
    box = "k:wake:@box"

    def final(owner: str, timeout: float) -> Wait:
        return Wait((box,), timeout, box, owner, "k", Call(GIVE_UP, ("k", "w"), (250, owner)))

    waiters = waiting.WaitList((box,), box)
    a = waiters.join(final("tok-a", 1.0), 0.0)
    b = waiters.join(final("tok-b", 1.0), 0.0)
    c = waiters.join(final("tok-c", 1.0), 0.0)
    later = waiters.join(final("tok-d", 2.0), 0.0)
    plain = waiters.join(Wait((box,), 0.5, box, "tok-e"), 0.0)  # not given up for: no lease
    assert waiters.next_due() == 1.0 and waiters.due(0.99) == []
    batch = waiters.due(1.0)
    assert batch == [a, b, c] and waiters.together(batch, 1.0)
    # one script for the batch: every owner token, read and taken off the queue at once
    call = give_up_together([w.wait for w in batch])
    assert call.script is GIVE_UP and call.keys == ("k", "w")
    assert call.args == (250, "tok-a", "tok-b", "tok-c")
    assert not waiters.together([later], 2.0)  # alone: its own last attempt
    assert waiters.route([box, "7 1000 3 tok-b"]) is b  # served before the read came back
    # the lease was granted to tok-c meanwhile: a is refused, c takes it in its own attempt
    assert waiters.settle(batch, waiting.owner_of([b"tok-c", b"host-1"])) == [a, c]
    assert a.reply == GaveUp("host-1") and c.reply is False and b.reply == "7 1000 3"
    assert waiters.settle([later], None) == [later] and later.reply is False  # not read
    assert len(waiters) == 1 and waiters.leave(plain)


# --- many waiters, default clients ---------------------------------------------------------------


async def test_200_asyncio_waiters_take_turns_on_few_connections(
    redis_server: RedisServer, lock_name: str
) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)  # the default pool
    observer = redis_server.client()
    holder = aio.Lock(client, lock_name, ttl=30)
    await holder.acquire()
    order: list[int] = []
    peak = 0

    async def waiter(i: int) -> None:
        lock = aio.Lock(client, lock_name, ttl=30)
        await lock.acquire(timeout=120)
        order.append(i)
        await lock.release()

    try:
        tasks = [asyncio.create_task(waiter(i)) for i in range(200)]
        direct = f"redlease:{{{lock_name}}}:direct"
        await async_wait_until(_until(lambda: observer.hlen(direct) == 200), timeout=60)
        peak = _connections(observer)
        await async_wait_until(_until(lambda: _blocked(observer) == 1), timeout=30)
        assert _blocked(observer) == 1  # one listener for all 200
        await holder.release()
        done, _ = await asyncio.wait(tasks, timeout=120)
        for t in done:
            t.result()  # none failed (an outage error would surface here)
        assert len(done) == 200 and sorted(order) == list(range(200))
        peak = max(peak, _connections(observer))
        assert peak <= BOUND, f"{peak} connections for one lock"
        # nobody waits: the listener is gone (a process locking many names keeps none)
        await async_wait_until(_until(lambda: not waiting.registry(client)[2]), timeout=10)
    finally:
        observer.close()
        await client.aclose()


def test_50_threads_wait_on_one_listener(redis_server: RedisServer, lock_name: str) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)  # the default pool
    observer = redis_server.client()
    holder = redlease.Lock(client, lock_name, ttl=30)
    holder.acquire()
    got: list[int] = []
    failed: list[BaseException] = []

    def waiter(i: int) -> None:
        lock = redlease.Lock(client, lock_name, ttl=30)
        try:
            lock.acquire(timeout=120)
            got.append(i)
            lock.release()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(50)]
    try:
        for t in threads:
            t.start()
        direct = f"redlease:{{{lock_name}}}:direct"
        wait_until(lambda: observer.hlen(direct) == 50, timeout=60)
        peak = _connections(observer)
        wait_until(lambda: _blocked(observer) == 1, timeout=30)  # one listener for all 50
        holder.release()
        for t in threads:
            t.join(120)
        assert not failed and sorted(got) == list(range(50))
        peak = max(peak, _connections(observer))
        assert peak <= BOUND, f"{peak} connections for one lock"
        wait_until(lambda: not waiting.registry(client)[2], timeout=10)  # after its linger
    finally:
        observer.close()
        client.close()


def test_two_locks_get_a_listener_each(redis_server: RedisServer, lock_name: str) -> None:
    client = redis_server.client()
    observer = redis_server.client()
    names = (lock_name + "-x", lock_name + "-y")
    holders = [redlease.Lock(client, n, ttl=30) for n in names]
    for h in holders:
        h.acquire()
    results: list[str] = []

    def waiter(name: str) -> None:
        lock = redlease.Lock(client, name)
        lock.acquire(timeout=60)
        results.append(name)
        lock.release()

    threads = [threading.Thread(target=waiter, args=(n,)) for n in names for _ in range(5)]
    try:
        for t in threads:
            t.start()
        for n in names:
            wait_until(lambda n=n: observer.hlen(f"redlease:{{{n}}}:direct") == 5, timeout=30)
        wait_until(lambda: _blocked(observer) == 2, timeout=30)  # one listener per lock
        for h in holders:
            h.release()
        for t in threads:
            t.join(60)
        assert sorted(results) == sorted(names * 5)
    finally:
        observer.close()
        client.close()


# --- a client-side limit is not an outage --------------------------------------------------------


def _check_limit(exc: BaseException, lock_name: str) -> None:
    assert isinstance(exc, redlease.ConnectionLimit)
    assert not isinstance(exc, redlease.LockUnavailable)
    assert exc.lock == lock_name and "max_connections=1" in str(exc)


def test_an_exhausted_pool_is_a_connection_limit(redis_server: RedisServer, lock_name: str) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, max_connections=1)
    observer = redis_server.client()
    holder = redlease.Lock(client, lock_name, ttl=5)
    holder.acquire()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            redlease.Lock(client, lock_name).acquire(timeout=3)
        except redlease.LockError as exc:  # times out (or hits the same limit)
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        wait_until(lambda: _blocked(observer) == 1, timeout=30)  # the listener has the one
        with pytest.raises(redlease.LockError) as caught:
            holder.release()
        _check_limit(caught.value, lock_name)
    finally:
        waiter.join(30)
        observer.close()
        client.close()
    assert outcome and not waiter.is_alive()


async def test_an_exhausted_asyncio_pool_is_a_connection_limit(
    redis_server: RedisServer, lock_name: str
) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port, max_connections=1)
    observer = redis_server.client()
    holder = aio.Lock(client, lock_name, ttl=5)
    await holder.acquire()
    waiter = asyncio.create_task(aio.Lock(client, lock_name).acquire(timeout=3))
    try:
        await async_wait_until(_until(lambda: _blocked(observer) == 1), timeout=30)
        with pytest.raises(redlease.LockError) as caught:
            await holder.release()
        _check_limit(caught.value, lock_name)
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        observer.close()
        await client.aclose()


# --- honest timeouts with many waiters -----------------------------------------------------------


async def _timing_out(
    client: aioredis.Redis, lock_name: str, timeout: float, starts: list[float] | None = None
) -> float | None:
    """How long a waiter took to give up (None: it acquired, and released at once); its start
    goes to ``starts``. Its lease TTL is long: a lease stranded with a waiter that gave up
    would outlive the test."""
    lock = aio.Lock(client, lock_name, ttl=30)
    start = time.monotonic()
    if starts is not None:
        starts.append(start)
    try:
        await lock.acquire(timeout=timeout)
    except redlease.LockTimeout:
        return time.monotonic() - start
    await lock.release()
    return None


def _queued(server: RedisServer, lock_name: str) -> int:
    """Registrations and enlistments left for ``lock_name``."""
    keys = LockKeys.for_name(lock_name)
    with server.client() as observer:
        return int(observer.zcard(keys.waiters)) + int(observer.hlen(keys.direct))


def _free(server: RedisServer, lock_name: str) -> bool:
    """Nobody holds ``lock_name``."""
    with server.client() as observer:
        return not observer.exists(LockKeys.for_name(lock_name).lease)


@pytest.mark.parametrize("release_at_deadlines", [False, True])
async def test_many_asyncio_waiters_give_up_together_never_early_and_strand_nothing(
    redis_server: RedisServer, lock_name: str, release_at_deadlines: bool
) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    holder = aio.Lock(client, lock_name, ttl=30)
    await holder.acquire()
    # long enough for 100 tasks to register on a busy machine before the first one gives up
    timeout = 2.0
    starts: list[float] = []
    try:
        tasks = [
            asyncio.create_task(_timing_out(client, lock_name, timeout, starts)) for _ in range(100)
        ]
        if release_at_deadlines:
            await async_wait_until(_until(lambda: _queued(redis_server, lock_name) == 200), 30)
            # the release falls just before the first deadline, among the batch of give-ups
            await asyncio.sleep(max(0.0, min(starts) + timeout - 0.02 - time.monotonic()))
            await holder.release()
        elapsed = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert all(e is None or timeout <= e < timeout + 10 for e in elapsed)  # loose max
        if not release_at_deadlines:
            assert None not in elapsed
            await holder.release()
        # given up together: the script that told them so took them off the queue; a waiter
        # the release handed the lease to before was told it was its own, and took it in its
        # last attempt. So once all are back: nobody queued, and the lock free at once.
        assert _queued(redis_server, lock_name) == 0 and _free(redis_server, lock_name)
        # nobody holds it: no lease went to a waiter that gave up
        probe = aio.Lock(client, lock_name)
        await probe.acquire(blocking=False)  # LockContention if a lease were stranded
        await probe.release()
    finally:
        await client.aclose()


async def test_a_waiter_told_it_gave_up_is_off_the_queue_before_its_timeout_is_raised(
    redis_server: RedisServer, lock_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener tells a waiter it gave up (the lease was held at its deadline) with the
    same script that takes it off the queue: when its LockTimeout is raised nothing is left
    for its process to send (it may close its client or exit at once), and a release at once
    after goes to nobody that left. Before, its LEAVE came after, in a task of its own: cut off
    by a client closed at once, the release granted the lease to the waiter that had gone,
    stranded until its TTL (tests/core/test_departed_waiters.py)."""
    monkeypatch.setattr(waiting, "TOGETHER", 1)  # the listener gives up for a lone waiter too
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    holder = aio.Lock(client, lock_name, ttl=30, identity="holder")
    quitter = aio.Lock(client, lock_name, ttl=30, identity="quitter")
    # its registration outlives the release below however late that comes (busy machine)
    quitter.prim = dataclasses.replace(
        quitter.prim, options=dataclasses.replace(quitter.prim.options, registration_grace=30)
    )
    try:
        await holder.acquire()
        with pytest.raises(redlease.LockTimeout):
            await quitter.acquire(timeout=0.3)
        # read before this task yields: nothing the listener might still send has gone out
        assert _queued(redis_server, lock_name) == 0
        await holder.release()
        assert _free(redis_server, lock_name)  # handed to nobody
        probe = aio.Lock(client, lock_name)
        await probe.acquire(blocking=False)
        await probe.release()
    finally:
        await client.aclose()


def test_many_threads_never_give_up_early(redis_server: RedisServer, lock_name: str) -> None:
    client = redis_server.client()
    holder = redlease.Lock(client, lock_name, ttl=30)
    holder.acquire()
    timeout = 0.5
    elapsed: list[float] = []

    def waiter() -> None:
        lock = redlease.Lock(client, lock_name)
        start = time.monotonic()
        with pytest.raises(redlease.LockTimeout):
            lock.acquire(timeout=timeout)
        elapsed.append(time.monotonic() - start)

    threads = [threading.Thread(target=waiter) for _ in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert len(elapsed) == 30 and min(elapsed) >= timeout
        assert max(elapsed) < timeout + 10
        assert int(client.zcard(f"redlease:{{{lock_name}}}:waiters")) == 0
    finally:
        holder.release()
        client.close()


def test_a_waiter_that_times_out_leaves_the_queue_in_its_last_attempt(
    redis_server: RedisServer, lock_name: str
) -> None:
    client = redis_server.client()
    holder = redlease.Lock(client, lock_name, ttl=30)
    holder.acquire()
    waiter = redlease.Lock(client, lock_name)
    counting = Counting(waiter._node)
    waiter._node = counting  # type: ignore[assignment]
    try:
        with pytest.raises(redlease.LockTimeout):
            waiter.acquire(timeout=0.2)
        # one round trip to give up: no LEAVE after the last attempt, nothing left queued
        assert counting.calls[-1] == "acquire" and "leave" not in counting.calls
        keys = LockKeys.for_name(lock_name)
        assert client.zcard(keys.waiters) == 0 and client.hlen(keys.direct) == 0
    finally:
        holder.release()
        client.close()


# --- N waiters on one held lock: connections, honest timeouts, one grant per release, in order ---

# 1 s timeouts give up within this much: sound on a loaded 2-core machine (1,000 asyncio writers
# gave up 0.59 s late beside a CI run and two other test runs), and below the 5 s a give-up tied
# to a BLPOP's server timeout (the fallback step, Options.max_wait_step) would take. How late
# they really are is measured by `make bench-scale` (waiters), not asserted here.
GIVE_UP_SLACK = 2.0
L = TypeVar("L", redlease.Lock, aio.Lock)
SCALE = [200, pytest.param(1000, marks=pytest.mark.slow)]


class Connections:
    """The most connections named ``name`` on the server, sampled every 5 ms by a thread (the
    process under test names its client; the observer's own are not counted)."""

    def __init__(self, server: RedisServer, name: str) -> None:
        self.observer = server.client()
        self.name = name
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> int:
        return sum(1 for c in self.observer.client_list() if c.get("name") == self.name)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.most = max(self.most, self.now())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.observer.close()
        return self.most


def _patient(lock: L) -> L:
    """``lock`` with waits that outlast the test: a waiter re-registers (moving in the queue)
    only after its longest wait, so the queue order read once is the order of the turns."""
    lock.prim = dataclasses.replace(
        lock.prim, options=dataclasses.replace(lock.prim.options, max_wait_step=300.0)
    )
    return lock


def _queue_order(observer: redis.Redis, lock_name: str) -> list[str]:
    """The identities of the enlisted waiters, head first (the order releases serve them)."""
    keys = LockKeys.for_name(lock_name)
    direct = {as_str(k): as_str(v).split(" ")[1] for k, v in observer.hgetall(keys.direct).items()}
    return [direct[as_str(token)] for token in observer.zrange(keys.waiters, 0, -1)]


class Turns:
    """What the waiters saw: who got the lock in which order with which fencing token, and
    whether two ever held it at once (each release must hand it to exactly one waiter)."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.inside = 0
        self.overlapped = False
        self.got: list[tuple[str, int]] = []

    def enter(self, who: str, fence: int) -> None:
        with self.guard:
            self.inside += 1
            self.overlapped = self.overlapped or self.inside > 1
            self.got.append((who, fence))

    def leave(self) -> None:
        with self.guard:
            self.inside -= 1

    def check(self, expected: list[str], first_fence: int) -> None:
        assert not self.overlapped, "two waiters held the lock at once"
        assert [who for who, _ in self.got] == expected  # in queue order, nobody lost
        fences = [fence for _, fence in self.got]
        assert all(a < b for a, b in itertools.pairwise([first_fence, *fences]))  # fresh each


def _check_gave_up(elapsed: list[float], n: int, timeout: float) -> None:
    assert len(elapsed) == n
    assert min(elapsed) >= timeout, f"gave up early: {min(elapsed):.3f}s"
    assert max(elapsed) <= timeout + GIVE_UP_SLACK, f"gave up late: {max(elapsed):.3f}s"


@pytest.mark.parametrize("n", SCALE)
async def test_n_asyncio_waiters_share_few_connections_and_take_turns_in_order(
    redis_server: RedisServer, lock_name: str, n: int
) -> None:
    name = f"waiters-{lock_name}"[:60]
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port, client_name=name)
    observer = redis_server.client()
    conns = Connections(redis_server, name)
    holder = aio.Lock(client, lock_name, ttl=60)
    first = (await holder.acquire()).fencing_token
    turns = Turns()

    async def waiter(i: int) -> None:
        lock = _patient(aio.Lock(client, lock_name, ttl=60, identity=f"w{i}"))
        lease = await lock.acquire(timeout=300)
        turns.enter(f"w{i}", lease.fencing_token)
        turns.leave()
        await lock.release()

    try:
        tasks = [asyncio.create_task(waiter(i)) for i in range(n)]
        direct = LockKeys.for_name(lock_name).direct
        await async_wait_until(_until(lambda: observer.hlen(direct) == n), timeout=120)
        await async_wait_until(_until(lambda: _blocked(observer) == 1), timeout=30)
        expected = _queue_order(observer, lock_name)
        await holder.release()
        done, _ = await asyncio.wait(tasks, timeout=300)
        for t in done:
            t.result()
        assert len(done) == n
        turns.check(expected, first)
    finally:
        peak = conns.stop()
        observer.close()
        await client.aclose()
    assert peak <= BOUND, f"{peak} connections for one lock and {n} waiters"


@pytest.mark.parametrize("n", SCALE)
def test_n_threads_share_few_connections_and_take_turns_in_order(
    redis_server: RedisServer, lock_name: str, n: int
) -> None:
    name = f"waiters-{lock_name}"[:60]
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, client_name=name)
    observer = redis_server.client()
    conns = Connections(redis_server, name)
    holder = redlease.Lock(client, lock_name, ttl=60)
    first = holder.acquire().fencing_token
    turns = Turns()
    failed: list[BaseException] = []

    def waiter(i: int) -> None:
        lock = _patient(redlease.Lock(client, lock_name, ttl=60, identity=f"w{i}"))
        try:
            lease = lock.acquire(timeout=300)
            turns.enter(f"w{i}", lease.fencing_token)
            turns.leave()
            lock.release()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    threads = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(n)]
    try:
        for t in threads:
            t.start()
        direct = LockKeys.for_name(lock_name).direct
        wait_until(lambda: observer.hlen(direct) == n, timeout=120)
        wait_until(lambda: _blocked(observer) == 1, timeout=30)
        expected = _queue_order(observer, lock_name)
        holder.release()
        for t in threads:
            t.join(300)
        assert not failed and not any(t.is_alive() for t in threads)
        turns.check(expected, first)
    finally:
        peak = conns.stop()
        observer.close()
        client.close()
    assert peak <= BOUND, f"{peak} connections for one lock and {n} waiters"


@pytest.mark.parametrize("n", SCALE)
async def test_n_asyncio_waiters_give_up_at_their_own_deadline(
    redis_server: RedisServer, lock_name: str, n: int
) -> None:
    name = f"waiters-{lock_name}"[:60]
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port, client_name=name)
    conns = Connections(redis_server, name)
    holder = aio.Lock(client, lock_name, ttl=60)
    await holder.acquire()
    timeout = 1.0
    try:
        tasks = [asyncio.create_task(_timing_out(client, lock_name, timeout)) for _ in range(n)]
        elapsed = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        assert None not in elapsed
        _check_gave_up([e for e in elapsed if e is not None], n, timeout)
        await async_wait_until(_until(lambda: _queued(redis_server, lock_name) == 0), timeout=30)
    finally:
        peak = conns.stop()
        await holder.release()
        await client.aclose()
    assert peak <= BOUND, f"{peak} connections for one lock and {n} waiters"


def _blocking_lock(kind: str, client: redis.Redis, name: str) -> Any:
    """A mutex, or the writer of a read-write lock (the hand-off by wake token)."""
    if kind == "writer":
        return redlease.ReadWriteLock(client, name, ttl=60).writer()
    return redlease.Lock(client, name, ttl=60)


@pytest.mark.parametrize("kind", ["lock", "writer"])
@pytest.mark.parametrize("n", SCALE)
def test_n_threads_give_up_at_their_own_deadline(
    redis_server: RedisServer, lock_name: str, n: int, kind: str
) -> None:
    """Threads due together are given up for together (one of them reads the lease for all
    those due): never early, within the bound, nothing left queued once they are back."""
    name = f"waiters-{lock_name}"[:60]
    client = redis.Redis(host="127.0.0.1", port=redis_server.port, client_name=name)
    conns = Connections(redis_server, name)
    holder = _blocking_lock(kind, client, lock_name)
    holder.acquire()
    timeout = 1.0
    elapsed: list[float] = []
    guard = threading.Lock()
    start = threading.Barrier(n + 1)

    def waiter() -> None:
        lock = _blocking_lock(kind, client, lock_name)
        start.wait()
        began = time.monotonic()
        try:
            lock.acquire(timeout=timeout)
        except redlease.LockTimeout:
            with guard:
                elapsed.append(time.monotonic() - began)
        else:
            lock.release()

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(n)]
    try:
        for t in threads:
            t.start()
        start.wait(60)
        for t in threads:
            t.join(120)
        _check_gave_up(elapsed, n, timeout)
        keys = LockKeys.for_name(lock_name)
        # read on a connection of its own: the lock's connections (redlease's own since its
        # requests connect within their deadline, core/idle.py) are what is counted
        probe_client = redis_server.client()
        assert (
            _queued(redis_server, lock_name) == 0 and probe_client.zcard(keys.writers_waiting) == 0
        )
        probe_client.close()
        holder.release()
        probe = _blocking_lock(kind, client, lock_name)  # nothing stranded: free at once
        probe.acquire(blocking=False)
        probe.release()
    finally:
        peak = conns.stop()
        client.close()
    assert peak <= BOUND, f"{peak} connections for one lock and {n} waiters"


@pytest.mark.parametrize("n", SCALE)
async def test_n_asyncio_writers_give_up_at_their_own_deadline(
    redis_server: RedisServer, lock_name: str, n: int
) -> None:
    """A read-write lock's writers (wake-up hand-off, no direct grant) due together are given
    up for together too: one GIVE_UP reads the lease and takes them off the queue, not a last
    attempt and a LEAVE each queued behind everyone else's."""
    name = f"waiters-{lock_name}"[:60]
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port, client_name=name)
    conns = Connections(redis_server, name)
    holder = aio.ReadWriteLock(client, lock_name, ttl=60).writer()
    await holder.acquire()
    timeout = 1.0

    async def writer() -> float:
        lock = aio.ReadWriteLock(client, lock_name, ttl=60).writer()
        start = time.monotonic()
        with pytest.raises(redlease.LockTimeout):
            await lock.acquire(timeout=timeout)
        return time.monotonic() - start

    try:
        elapsed = await asyncio.wait_for(asyncio.gather(*(writer() for _ in range(n))), 120)
        _check_gave_up(elapsed, n, timeout)
        keys = LockKeys.for_name(lock_name)
        with redis_server.client() as observer:
            queued = (keys.waiters, keys.writers_waiting)
            await async_wait_until(
                _until(lambda: sum(int(observer.zcard(k)) for k in queued) == 0), timeout=30
            )
        await holder.release()
        probe = aio.ReadWriteLock(client, lock_name).writer()  # nothing stranded: free at once
        await probe.acquire(blocking=False)
        await probe.release()
    finally:
        peak = conns.stop()
        await client.aclose()
    assert peak <= BOUND, f"{peak} connections for one lock and {n} writers"
