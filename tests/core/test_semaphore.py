"""The counting semaphore on one node and on a Redis Cluster, sync and asyncio: at most ``limit``
holders, each with its own lease and a token above every earlier one; notified waiting."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import redlease
import redlease.aio
from redlease import ConfigError, LockContention, NotOwned
from redlease.core.keys import LockKeys
from redlease.devtools.polling import async_wait_until, wait_until


def holders(n: int, client: Any, name: str, limit: int, **kw: Any) -> list[redlease.Semaphore]:
    return [redlease.Semaphore(client, name, limit=limit, identity=f"h{i}", **kw) for i in range(n)]


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that contain one instant (a start before an end at the same time)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


# --- one node and the cluster (any_client) ------------------------------------------------------


def test_limit_holders_then_refused_then_woken(any_client: Any, lock_name: str) -> None:
    sems = holders(4, any_client, lock_name, 3, ttl=30)
    leases = [s.acquire(blocking=False) for s in sems[:3]]
    tokens = [lease.fencing_token for lease in leases]
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    with pytest.raises(LockContention):
        sems[3].acquire(blocking=False)
    state = sems[0].state()
    assert [(h.identity, h.fencing_token) for h in state.holders] == [
        (f"h{i}", t) for i, t in enumerate(tokens)
    ]
    assert state.holder == "h0" and state.fencing_token == tokens[0]
    keys = LockKeys.for_name(lock_name)
    assert any_client.exists(keys.slot(1), keys.slot(2)) == 2  # one hash tag: one cluster slot

    got: dict[str, Any] = {}

    def wait() -> None:
        start = time.monotonic()
        got["lease"] = sems[3].acquire(timeout=20)
        got["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=wait)
    t.start()
    wait_until(lambda: sems[0].state().waiters == 1, timeout=10)
    sems[1].release()
    t.join(20)
    # woken by the release (notification), well before its timeout and the holders' TTL
    assert got["elapsed"] < 10
    assert got["lease"].fencing_token > max(tokens)
    assert {h.identity for h in sems[0].state().holders} == {"h0", "h2", "h3"}
    for s in (sems[0], sems[2], sems[3]):
        s.release()
    assert sems[0].state().holders == ()


def test_holders_extend_independently_and_an_expiry_frees_a_slot(
    any_client: Any, lock_name: str
) -> None:
    a, b, c = holders(3, any_client, lock_name, 2, ttl=1.5)
    a.acquire()
    first = b.acquire()
    a.extend(30)
    by_name = {h.identity: h.expires_in_ms for h in a.state().holders}
    assert by_name["h0"] is not None and by_name["h0"] > 5000
    assert by_name["h1"] is not None and by_name["h1"] <= 1500
    # b is not renewed: its slot frees at its expiry and the waiter gets it
    start = time.monotonic()
    lease = c.acquire(timeout=20)
    assert time.monotonic() - start < 15
    assert lease.fencing_token > first.fencing_token
    with pytest.raises(NotOwned):
        b.extend()
    with pytest.raises(NotOwned):
        b.release()  # forgotten after the refused extend
    a.extend()  # a is untouched
    assert {h.identity for h in a.state().holders} == {"h0", "h2"}
    a.release()
    c.release()


def test_not_owned_on_the_server(any_client: Any, lock_name: str) -> None:
    a, b = holders(2, any_client, lock_name, 2, ttl=0.2)
    a.acquire()
    wait_until(lambda: not a.state().holders, timeout=10)
    b.acquire()  # may take a's old slot
    with pytest.raises(NotOwned):
        a.release()
    a.acquire()
    b2 = redlease.Semaphore(any_client, lock_name, limit=2, ttl=0.2)
    wait_until(lambda: not a.state().holders, timeout=10)
    b2.acquire()
    with pytest.raises(NotOwned):
        a.extend()


def test_stress_never_more_than_limit(any_client: Any, lock_name: str) -> None:
    limit, workers, rounds = 2, 12, 3
    intervals: list[tuple[float, float]] = []
    tokens: list[int] = []
    errors: list[BaseException] = []
    guard = threading.Lock()

    def work(i: int) -> None:
        sem = redlease.Semaphore(any_client, lock_name, limit=limit, ttl=30, identity=f"w{i}")
        try:
            for _ in range(rounds):
                lease = sem.acquire(timeout=60)
                start = time.monotonic()
                time.sleep(0.002)  # the protected work
                end = time.monotonic()
                with guard:
                    intervals.append((start, end))
                    tokens.append(lease.fencing_token)
                sem.release()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(tokens) == workers * rounds
    assert len(set(tokens)) == len(tokens)
    assert max_overlap(intervals) <= limit


def test_limit_is_validated(client: Any, lock_name: str) -> None:
    for bad in (0, 65, "2", True, 2.0):
        with pytest.raises(ConfigError) as err:
            redlease.Semaphore(client, lock_name, limit=bad)  # type: ignore[arg-type]
        assert err.value.field == "limit"
    assert redlease.Semaphore(client, lock_name, limit=redlease.MAX_HOLDERS).limit == 64
    for make in (
        lambda: redlease.Lock(client, lock_name, limit=2),
        lambda: redlease.ReentrantLock(client, lock_name, limit=2),
        lambda: redlease.MultiLock(client, [lock_name, lock_name + "b"], limit=2),
    ):
        with pytest.raises(ConfigError) as err:
            make()
        assert err.value.field == "limit"


def test_limit_one_is_the_mutex(client: Any, lock_name: str) -> None:
    sem = redlease.Semaphore(client, lock_name, limit=1, ttl=10)
    lock = redlease.Lock(client, lock_name, ttl=10)
    first = sem.acquire()
    with pytest.raises(LockContention):
        lock.acquire(blocking=False)
    sem.release()
    assert lock.acquire().fencing_token > first.fencing_token
    assert [k.decode() for k in client.keys("*slot*")] == []
    assert lock.state().holders[0].identity == lock.identity
    lock.release()


def test_each_client_honours_its_own_limit(client: Any, lock_name: str) -> None:
    wide = holders(3, client, lock_name, 3, ttl=10)
    narrow = redlease.Semaphore(client, lock_name, limit=2, ttl=10)
    for s in wide[:2]:
        s.acquire()
    with pytest.raises(LockContention):  # slots 0 and 1 are held; slot 2 is not narrow's
        narrow.acquire(blocking=False)
    wide[2].acquire(blocking=False)  # slot 2
    wide[0].release()
    narrow.acquire(blocking=False)  # slot 0
    assert len(wide[0].state().holders) == 3


def test_a_waiter_is_handed_only_a_slot_below_its_limit(client: Any, lock_name: str) -> None:
    wide = holders(3, client, lock_name, 3, ttl=30)
    for s in wide:
        s.acquire()
    narrow = redlease.Semaphore(client, lock_name, limit=2, ttl=30, identity="narrow")
    got: dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.update(lease=narrow.acquire(timeout=20)))
    t.start()
    wait_until(lambda: wide[0].state().waiters == 1, timeout=10)
    wide[2].release()  # slot 2: above narrow's limit, not handed to it (the release is atomic)
    assert {h.identity for h in wide[0].state().holders} == {"h0", "h1"}
    wide[0].release()  # slot 0: narrow's
    t.join(20)
    assert "lease" in got
    narrow.extend()
    narrow.release()
    wide[1].release()


def test_hold_renews_and_releases(client: Any, lock_name: str) -> None:
    # TTL 1 s, renewed every third: a 0.3 s TTL was lost on a machine at load 18
    a, b = holders(2, client, lock_name, 2, ttl=1.0)
    with a.hold() as lease, b.hold():
        start = time.monotonic()
        wait_until(lambda: time.monotonic() > start + 3.5, timeout=20)  # over three TTLs
        assert lease.valid
        assert len(a.state().holders) == 2
    assert a.state().holders == ()


# --- asyncio ------------------------------------------------------------------------------------


async def test_async_limit_holders_and_notified_waiter(any_aclient: Any, lock_name: str) -> None:
    sems = [
        redlease.aio.Semaphore(any_aclient, lock_name, limit=3, ttl=30, identity=f"a{i}")
        for i in range(4)
    ]
    tokens = [(await s.acquire(blocking=False)).fencing_token for s in sems[:3]]
    assert tokens == sorted(tokens)
    with pytest.raises(LockContention):
        await sems[3].acquire(blocking=False)
    start = time.monotonic()
    waiter = asyncio.create_task(sems[3].acquire(timeout=20))

    async def registered() -> bool:
        return (await sems[0].state()).waiters == 1

    await async_wait_until(registered, timeout=10)
    await sems[2].release()
    lease = await asyncio.wait_for(waiter, 20)
    assert time.monotonic() - start < 10
    assert lease.fencing_token > max(tokens)
    await sems[0].extend()
    with pytest.raises(NotOwned):
        await sems[2].extend()
    assert {h.identity for h in (await sems[0].state()).holders} == {"a0", "a1", "a3"}
    for s in (sems[0], sems[1], sems[3]):
        await s.release()


async def test_async_stress_never_more_than_limit(any_aclient: Any, lock_name: str) -> None:
    limit, workers, rounds = 2, 12, 3
    intervals: list[tuple[float, float]] = []
    tokens: list[int] = []

    async def work(i: int) -> None:
        sem = redlease.aio.Semaphore(any_aclient, lock_name, limit=limit, ttl=30)
        for _ in range(rounds):
            lease = await sem.acquire(timeout=60)
            start = time.monotonic()
            await asyncio.sleep(0.002)
            intervals.append((start, time.monotonic()))
            tokens.append(lease.fencing_token)
            await sem.release()

    await asyncio.wait_for(asyncio.gather(*(work(i) for i in range(workers))), 120)
    assert len(set(tokens)) == len(tokens) == workers * rounds
    assert max_overlap(intervals) <= limit
