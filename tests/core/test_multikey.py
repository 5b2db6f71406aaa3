"""Multi-key leases on one redis-server (one script per operation) and on a 3-master cluster
(names on different masters: ordered acquisition with undo), blocking and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

import redlease
from redlease import ConfigError, LockContention, LockTimeout, LockUnavailable, NotOwned, aio
from redlease.core import flows, primitives
from redlease.core.keys import LockKeys
from redlease.core.multi import OrderedState, abort
from redlease.devtools.multikey import spread
from redlease.devtools.polling import async_wait_until, wait_until


def held_by(lock: Any, name: str) -> str | None:
    return redlease.Lock(lock._node.client, name).state().holder  # type: ignore[no-any-return]


def test_one_name_is_exactly_a_lock(any_client: Any, lock_name: str) -> None:
    multi = redlease.MultiLock(any_client, [lock_name], ttl=5, identity="m")
    single = redlease.Lock(any_client, lock_name, ttl=5, identity="m")
    token = flows.new_token()
    assert multi.prim == single.prim and multi.name == single.name
    for make in ("acquire", "release", "leave"):
        args: tuple[Any, ...] = (token, 0) if make == "acquire" else (token,)
        assert getattr(multi.prim, make)(*args) == getattr(single.prim, make)(*args)
    first = multi.acquire()
    with pytest.raises(LockContention):
        redlease.Lock(any_client, lock_name).acquire(blocking=False)
    with pytest.raises(redlease.AlreadyHeld):
        multi.acquire(blocking=False)
    timeless = {"now_ms": 0, "expires_in_ms": 0, "holders": ()}  # read a millisecond apart
    m_state, s_state = multi.state(), single.state()
    assert replace(m_state, **timeless) == replace(s_state, **timeless)
    assert [replace(h, expires_in_ms=0) for h in m_state.holders] == [
        replace(h, expires_in_ms=0) for h in s_state.holders
    ]
    multi.release()
    assert single.acquire().fencing_token > first.fencing_token
    single.release()


def test_all_or_nothing_under_contention(any_client: Any, lock_name: str) -> None:
    a, b, c = spread(lock_name)
    other = redlease.Lock(any_client, b, ttl=30, identity="other")
    other.acquire()
    multi = redlease.MultiLock(any_client, [a, b, c], ttl=30, identity="multi")
    with pytest.raises(LockContention) as err:
        multi.acquire(blocking=False)
    assert err.value.holder == "other" and repr(b) in str(err.value)
    start = time.monotonic()
    with pytest.raises(LockTimeout):
        multi.acquire(timeout=0.2)
    assert time.monotonic() - start >= 0.2
    states = multi.states()
    assert states[a].holder is None and states[c].holder is None  # nothing taken in part
    assert states[b].holder == "other"
    assert all(s.waiters == 0 for s in states.values())  # registrations dropped
    assert multi.state().holder is None
    other.release()
    lease = multi.acquire(blocking=False)
    assert {s.holder for s in multi.states().values()} == {"multi"}
    assert {s.fencing_token for s in multi.states().values()} == {lease.fencing_token}
    multi.release()
    assert all(s.holder is None for s in multi.states().values())


def test_fencing_tokens_increase_across_single_and_multi(any_client: Any, lock_name: str) -> None:
    a, b = spread(lock_name, 2)
    seen: dict[str, list[int]] = {a: [], b: []}  # every token issued for each name, in order

    def hold(*names: str) -> None:
        lock: Any = (
            redlease.MultiLock(any_client, list(names), ttl=5)
            if len(names) > 1
            else redlease.Lock(any_client, names[0], ttl=5)
        )
        token = lock.acquire().fencing_token
        lock.release()
        for n in names:
            seen[n].append(token)

    for _ in range(3):
        hold(b)  # b's counter runs ahead of a's
    hold(a, b)  # above every token of a and of b
    hold(a)  # above the multi-key token, although a's own counter was behind
    hold(b, a)
    hold(b)
    hold(a)
    for name, tokens in seen.items():
        assert tokens == sorted(set(tokens)), (name, tokens)  # strictly increasing
    assert seen[a][0] > seen[b][2]  # the first multi-key token is above b's single ones


def test_waiter_is_woken_by_release_of_the_blocking_name(any_client: Any, lock_name: str) -> None:
    a, b = spread(lock_name, 2)
    holder = redlease.Lock(any_client, b, ttl=30)
    multi = redlease.MultiLock(any_client, [a, b], ttl=30)
    for _ in range(3):
        holder.acquire()
        got_at: list[float] = []

        def wait(got_at: list[float] = got_at) -> None:
            multi.acquire(timeout=20)
            got_at.append(time.monotonic())

        t = threading.Thread(target=wait)
        t.start()
        wait_until(lambda: multi.states()[b].waiters == 1)
        assert multi.states()[a].waiters == 0  # registered only where it was refused
        released_at = time.monotonic()
        holder.release()
        t.join(20)
        assert got_at, "the waiter never got the lease"
        # a poll would wait for the 5 s fallback step (the holder's TTL is 30 s)
        assert got_at[0] - released_at < 2.5
        multi.release()


def test_release_wakes_the_waiters_of_every_name(client: Any, lock_name: str) -> None:
    """Releasing a multi-key lease wakes each name's waiters. Before, the release passed its
    seventh key (the second name's reservation flag) to the direct hand-off as its hash: once
    the second name's waiters were woken (the flag set), the third name's release failed
    (WRONGTYPE) after its lease was deleted, and its waiters were never woken."""
    names = [f"{lock_name}-{i}" for i in range(3)]
    multi = redlease.MultiLock(client, names, ttl=30, identity="multi")
    multi.acquire()
    got: list[str] = []

    def wait(name: str) -> None:
        redlease.Lock(client, name, ttl=30, identity=name).acquire(timeout=20)
        got.append(name)

    waiters = [threading.Thread(target=wait, args=(name,)) for name in names[1:]]
    for t in waiters:
        t.start()
    wait_until(lambda: all(client.exists(LockKeys.for_name(n).waiters) for n in names[1:]))
    multi.release()
    for t in waiters:
        t.join(20)
    assert sorted(got) == names[1:]
    assert [held_by(multi, n) for n in names] == [None, names[1], names[2]]


def test_hold_renews_every_name_and_releases_them(any_client: Any, lock_name: str) -> None:
    names = spread(lock_name)
    multi = redlease.MultiLock(any_client, names, ttl=2.0, identity="r")
    with multi.hold(timeout=5) as lease:
        end = time.monotonic() + 4.2  # past two TTLs: only renewal keeps every name
        while time.monotonic() < end:
            assert lease.valid
            time.sleep(0.05)
        assert {s.holder for s in multi.states().values()} == {"r"}
    assert all(s.holder is None for s in multi.states().values())


def test_a_lost_name_loses_the_lease_and_frees_the_rest(any_client: Any, lock_name: str) -> None:
    a, b = spread(lock_name, 2)
    multi = redlease.MultiLock(any_client, [a, b], ttl=30)
    lease = multi.acquire()
    any_client.delete(f"redlease:{{{b}}}")  # b force-released behind the holder's back
    with pytest.raises(NotOwned):
        multi.extend()
    assert not lease.valid and not multi.owned()
    assert multi.states()[a].holder is None  # given back at once, not left until expiry
    assert multi.state().holder is None


def test_state_names_a_holder_only_when_it_holds_every_name(
    any_client: Any, lock_name: str
) -> None:
    a, b = spread(lock_name, 2)
    redlease.Lock(any_client, a, ttl=30, identity="x").acquire()
    multi = redlease.MultiLock(any_client, [a, b], ttl=30)
    state = multi.state()
    assert state.name == f"{a},{b}" and state.holder is None and state.fencing_token is None
    assert multi.states()[a].holder == "x"


@pytest.mark.parametrize("names", [[], ["ok", "ok"], ["bad{name"], "a-string", [""]], ids=str)
def test_bad_names_are_refused_naming_the_field(client: Any, names: Any) -> None:
    with pytest.raises(ConfigError) as err:
        redlease.MultiLock(client, names)
    assert err.value.field == "names"


# --- asyncio --------------------------------------------------------------------------------------


async def test_async_all_or_nothing_and_fencing(any_aclient: Any, lock_name: str) -> None:
    a, b, c = spread(lock_name)
    other = aio.Lock(any_aclient, b, ttl=30, identity="other")
    before = await other.acquire()
    multi = aio.MultiLock(any_aclient, [c, a, b], ttl=30, identity="multi")
    with pytest.raises(LockContention):
        await multi.acquire(blocking=False)
    states = await multi.states()
    assert states[a].holder is None and states[c].holder is None
    waiter = asyncio.create_task(multi.acquire(timeout=20))
    await async_wait_until(lambda: _waiters(multi, b, 1))
    await other.release()
    lease = await waiter
    assert lease.fencing_token > before.fencing_token
    assert (await multi.state()).holder == "multi"
    await multi.release()
    after = await aio.Lock(any_aclient, a, ttl=5).acquire()
    assert after.fencing_token > lease.fencing_token


async def _waiters(lock: aio.MultiLock, name: str, n: int) -> bool:
    return (await lock.states())[name].waiters == n


async def test_async_cancelled_wait_leaves_nothing_behind(any_aclient: Any, lock_name: str) -> None:
    a, b = spread(lock_name, 2)
    other = aio.Lock(any_aclient, b, ttl=30, identity="other")
    await other.acquire()
    multi = aio.MultiLock(any_aclient, [a, b], ttl=30)
    task = asyncio.create_task(multi.acquire(timeout=20))
    await async_wait_until(lambda: _waiters(multi, b, 1))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    states = await multi.states()
    assert states[a].holder is None and states[a].waiters == 0
    assert states[b].holder == "other" and states[b].waiters == 0


async def test_async_hold_renews_every_name(any_aclient: Any, lock_name: str) -> None:
    names = spread(lock_name)
    multi = aio.MultiLock(any_aclient, names, ttl=2.0, identity="r")
    async with multi.hold(timeout=5) as lease:
        await asyncio.sleep(4.2)  # past two TTLs: only renewal keeps every name
        assert lease.valid
        assert {s.holder for s in (await multi.states()).values()} == {"r"}
    assert all(s.holder is None for s in (await multi.states()).values())


# --- the ordered flows without a server ----------------------------------------------------------


def test_abort_undoes_every_name_the_unanswered_one_last() -> None:
    a, b, c = (
        primitives.Primitive(LockKeys.for_name(n), primitives.Options(), "mutex") for n in "abc"
    )
    state = OrderedState(taken=[a, b], in_flight=c, registered=[b])
    flow = abort("tok", state)
    sent = [next(flow)]
    # the first undo fails (node down): the others are still sent, the error comes at the end
    sent.append(flow.throw(LockUnavailable("b", "down")))
    with pytest.raises(LockUnavailable):
        while True:
            sent.append(flow.send([1, 0]))
    assert [(r.script.name, r.keys[0]) for r in sent] == [
        ("release", "redlease:{b}"),
        ("release", "redlease:{a}"),
        ("release", "redlease:{c}"),  # its acquire got no reply: undone behind it, last
        ("leave", "redlease:{b}"),
        ("leave", "redlease:{c}"),
    ]
    assert all(r.owner == "tok" for r in sent)  # each is ordered behind the owner's requests
