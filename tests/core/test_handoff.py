"""The direct hand-off (a release grants the lease to the head waiter and pushes the grant to
it) and how scripts run (Functions where the server has them, EVALSHA otherwise).

A waiter that died or gave up must never strand a grant: the lease it was handed expires or is
passed on. The worst moments are forced through the lock flows, step by step, and with a
real process killed while it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core import _sync, flows, requests, scripts
from redlease.core import scripting as policy
from redlease.core.client import scripting
from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until, wait_until

from .test_processes import spawn


def _enlisted(client: Any, name: str, n: int = 1) -> bool:
    return int(client.hlen(LockKeys.for_name(name).direct)) >= n


class Counting:
    """A blocking executor that counts the scripts it runs, by name; ``sent`` has each one's
    (name, number of keys, number of arguments, reply)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.sent: list[tuple[str, int, int, Any]] = []
        self.name, self.lock, self.socket_timeout = inner.name, inner.lock, inner.socket_timeout

    def execute(self, req: Any) -> Any:
        reply = self.inner.execute(req)
        if isinstance(req, requests.Call):
            self.calls.append(req.script.name)
            self.sent.append((req.script.name, len(req.keys), len(req.args), reply))
        return reply


def _handed_over(a: Any, b: Any, client: Any, name: str) -> tuple[Any, Any]:
    """``a`` acquires, ``b`` waits (enlisted), ``a`` releases: (a's lease, the lease ``b`` was
    handed)."""
    first = a.acquire()
    got: list[redlease.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(b.acquire(timeout=10)))
    waiter.start()
    wait_until(lambda: _enlisted(client, name))
    a.release()
    waiter.join(10)
    return first, got[0]


@pytest.mark.parametrize("ttl", [1.5, 5.0], ids=["ttl-within-provisional", "ttl-above"])
def test_release_hands_the_lease_to_the_waiter_in_one_round_trip(
    any_client: Any, lock_name: str, ttl: float
) -> None:
    """The grant comes with the wake-up: no second acquire. A TTL above
    :data:`scripts.HANDED_MS` is handed provisionally, and the waiter's one extend confirms it
    to its TTL."""
    a = redlease.Lock(any_client, lock_name, ttl=5, identity="a")
    b = redlease.Lock(any_client, lock_name, ttl=ttl, identity="b")
    counting = Counting(b._node)
    b._node = counting
    first, lease = _handed_over(a, b, any_client, lock_name)
    assert lease.fencing_token > first.fencing_token and lease.valid
    assert ttl - 0.5 < lease.remaining() <= ttl
    confirm = ["extend"] if ttl * 1000 > scripts.HANDED_MS else []
    assert counting.calls == ["acquire", *confirm]
    assert b.state().expires_in_ms > (ttl - 0.5) * 1000  # the server's TTL is the waiter's
    state = b.state()
    assert state.holder == "b" and state.fencing_token == lease.fencing_token
    assert state.waiters == 0 and state.transitions == 2
    assert any_client.hlen(LockKeys.for_name(lock_name).direct) == 0
    b.release()
    assert b.state().holder is None


def _blocked(client: Any, name: str, who: str) -> tuple[Any, Any, Any, Any, str]:
    """A held lock and ``who``'s acquire flow, run up to its wait for a wake-up (refused and
    enlisted), not further: (holder, who's lock, flow, flow state, who's owner token)."""
    holder = redlease.Lock(client, name, ttl=5, identity="holder")
    lock = redlease.Lock(client, name, ttl=5, identity=who)
    holder.acquire()
    token, state = who[0] * 32, flows.AcquireState()
    # a registration of a minute: it must not lapse while a busy machine runs the test (the
    # flow is driven by hand and its BLPOP never sent, so no socket timeout bounds it)
    prim = replace(lock.prim, options=replace(lock.prim.options, max_wait_step=60.0))
    flow = flows.acquire(prim, token, blocking=True, timeout=120, state=state)
    req, _ = requests.resume(flow)
    req, _ = requests.resume(flow, lock._node.execute(req))
    assert isinstance(req, requests.Wait) and req.grants
    return holder, lock, flow, state, token


def test_an_uncontended_pair_sends_the_short_requests(any_client: Any, lock_name: str) -> None:
    """What the server parses per uncontended pair (issue 39: each key or argument costs it
    about 1k instructions): ACQUIRE with 6 keys and 4 arguments, the release in its short
    form (2 keys, the token). A renewed lease, which may have gathered waiters, releases with
    the full form at once."""
    lock = redlease.Lock(any_client, lock_name, ttl=5, identity="a")
    counting = Counting(lock._node)
    lock._node = counting
    lock.acquire()
    lock.release()
    assert counting.sent == [("acquire", 6, 4, counting.sent[0][3]), ("release", 2, 1, 0)]
    counting.sent.clear()
    lock.acquire()
    lock.extend()
    lock.release()
    assert [(name, keys) for name, keys, _, _ in counting.sent] == [
        ("acquire", 6),
        ("extend", 1),
        ("release", 7),
    ]


def test_a_short_release_that_meets_a_waiter_hands_the_lease_over_after_all(
    any_client: Any, lock_name: str
) -> None:
    """A lease granted at its first attempt releases with the short form, which does nothing
    when a waiter came meanwhile (-2): the full form follows and hands the lease over. The
    waiter's lease, handed over, releases with the full form at once, and so do the next
    releases of a handle that met waiters (handles.LOUD_RELEASES)."""
    a = redlease.Lock(any_client, lock_name, ttl=5, identity="a")
    b = redlease.Lock(any_client, lock_name, ttl=5, identity="b")
    a._node, b._node = Counting(a._node), Counting(b._node)
    first, handed = _handed_over(a, b, any_client, lock_name)
    assert handed.fencing_token > first.fencing_token and b.state().holder == "b"
    releases = [(keys, reply) for name, keys, _, reply in a._node.sent if name == "release"]
    assert releases == [(2, scripts.WAITERS), (7, 0)]
    b.release()
    assert [(name, keys) for name, keys, _, _ in b._node.sent][-1] == ("release", 7)
    assert b.state().holder is None
    a.acquire()
    a.release()  # nobody waits now, but a met waiters a release ago
    assert [(name, keys) for name, keys, _, _ in a._node.sent][-2:] == [
        ("acquire", 6),
        ("release", 7),
    ]


def test_waiter_that_gives_up_as_the_grant_arrives_passes_it_on(
    any_client: Any, lock_name: str
) -> None:
    holder, quitter, flow, state, token = _blocked(any_client, lock_name, "quitter")
    holder.release()  # granted to the quitter, the only waiter, which has stopped waiting
    assert quitter.state().holder == "quitter"
    got: list[redlease.Lease] = []
    nxt = redlease.Lock(any_client, lock_name, ttl=5, identity="next")
    waiter = threading.Thread(target=lambda: got.append(nxt.acquire(timeout=30)))
    waiter.start()
    wait_until(lambda: _enlisted(any_client, lock_name, 1))  # the quitter's enlistment is gone
    flow.close()
    _sync.drive(quitter._node, flows.abort_acquire(quitter.prim, token, state))
    waiter.join(30)
    assert got and got[0].valid  # passed on to the next waiter, directly
    assert nxt.state().holder == "next"
    assert not any_client.exists(LockKeys.for_name(lock_name).grants(token))
    nxt.release()


def test_grant_that_arrived_after_the_wait_ended_is_taken_by_the_next_attempt(
    any_client: Any, lock_name: str
) -> None:
    holder, late, flow, _, token = _blocked(any_client, lock_name, "late")
    held = holder.lease().fencing_token  # type: ignore[union-attr]
    holder.release()  # the grant is pushed while the waiter is not listening
    req, _ = requests.resume(flow, False)  # its wait timed out: it tries again
    req, grant = requests.resume(flow, late._node.execute(req))
    assert req is None and grant.fence > held and not grant.reentered
    assert late.state().holder == "late" and late.state().expires_in_ms > 4500
    assert not any_client.exists(LockKeys.for_name(lock_name).grants(token))


def test_release_drops_enlistments_of_lapsed_registrations(any_client: Any, lock_name: str) -> None:
    """A waiter that vanished without a word (its registration lapsed) is not granted the
    lease, and its enlistment goes with its registration."""
    holder = redlease.Lock(any_client, lock_name, ttl=5, identity="holder")
    holder.acquire()
    gone = redlease.Lock(any_client, lock_name, ttl=5, identity="gone")
    prim = replace(gone.prim, options=replace(gone.prim.options, registration_grace=0.05))
    flow = flows.acquire(prim, "g" * 32, blocking=True, timeout=0.05, state=flows.AcquireState())
    req, _ = requests.resume(flow)
    requests.resume(flow, gone._node.execute(req))  # refused and enlisted, then never again
    assert _enlisted(any_client, lock_name)
    wait_until(lambda: holder.state().waiters == 0)  # its registration lapsed (100 ms)
    holder.release()
    assert holder.state().holder is None
    assert any_client.hlen(LockKeys.for_name(lock_name).direct) == 0


def test_a_long_wait_renews_the_handed_lease(any_client: Any, lock_name: str) -> None:
    """The local deadline of a handed lease counts from the attempt before the wait; after a
    wait longer than a third of the TTL the waiter renews it instead of returning it short."""
    a = redlease.Lock(any_client, lock_name, ttl=5, identity="a")
    b = redlease.Lock(any_client, lock_name, ttl=0.6, identity="b")
    a.acquire()
    got: list[redlease.Lease] = []
    waiter = threading.Thread(target=lambda: got.append(b.acquire(timeout=10)))
    waiter.start()
    wait_until(lambda: _enlisted(any_client, lock_name))
    time.sleep(0.3)  # the wait being measured, not synchronisation
    a.release()
    waiter.join(10)
    assert got[0].remaining() > 0.45
    b.release()


def test_waiter_sigkilled_while_enlisted_never_strands_the_lock(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    holder = redlease.Lock(client, "k", ttl=5, identity="holder")
    first = holder.acquire()
    proc = spawn("hold", str(redis_server.port), "k", "1.0")
    try:
        wait_until(lambda: _enlisted(client, "k"), timeout=60)  # a process start, on a busy machine
        proc.kill()
        proc.wait()
        holder.release()  # handed to the dead waiter: its lease must expire
        dead = holder.state()
        assert dead.holder == "worker-k" and dead.fencing_token > first.fencing_token
        t0 = time.monotonic()
        lease = redlease.Lock(client, "k", ttl=5, identity="c").acquire(timeout=10)
        assert time.monotonic() - t0 < 4.0  # woken at its expiry (TTL 1 s), not c's poll (5 s)
        assert lease.fencing_token > dead.fencing_token
    finally:
        proc.kill()
        proc.wait()


DEAD_TTL = 60.0  # the dead waiter's TTL: what a hand-off to it cost before
DEAD_BOUND = 20.0  # the live waiter gets the lock within this: far below DEAD_TTL


def test_a_waiter_sigkilled_while_enlisted_holds_the_lock_for_the_provisional_grant_only(
    redis_server: RedisServer,
) -> None:
    """A waiter SIGKILLed after enlisting, before the release: the release hands it the lease
    (its registration has not lapsed), but only provisionally (:data:`scripts.HANDED_MS`;
    nobody confirms it), so the live waiter behind it gets the lock once that ran out and its
    own wait step ends (docs/safety.md), not after the dead waiter's TTL. Tokens still rise."""
    client = redis_server.client()
    holder = redlease.Lock(client, "d", ttl=DEAD_TTL, identity="holder")
    first = holder.acquire()
    # both registrations outlive the test (a busy machine may be slow to get to the release);
    # the head of the queue is the one that lapses first: the dead waiter's
    proc = spawn("hold", str(redis_server.port), "d", str(DEAD_TTL), "60")
    got: list[tuple[redlease.Lease, float]] = []
    try:
        wait_until(lambda: _enlisted(client, "d"), timeout=60)  # a process start, on a busy machine
        proc.kill()
        proc.wait()
        live = redlease.Lock(client, "d", ttl=DEAD_TTL, identity="live")
        live.prim = replace(live.prim, options=replace(live.prim.options, registration_grace=120))

        def acquire() -> None:
            with contextlib.suppress(redlease.LockTimeout):
                got.append((live.acquire(timeout=DEAD_BOUND), time.monotonic()))

        waiter = threading.Thread(target=acquire)
        waiter.start()
        wait_until(lambda: _enlisted(client, "d", 2))
        released = time.monotonic()
        holder.release()  # handed to the dead waiter, the head
        waiter.join(DEAD_BOUND + 10)
        assert got, f"the live waiter waited over {DEAD_BOUND}s: the dead one kept its TTL"
        lease, at = got[0]
        print(f"dead time after a hand-off to a SIGKILLed waiter: {at - released:.2f}s")
        state = live.state()
        # holder -> the dead waiter (the hand-off) -> the live one
        assert state.holder == "live" and state.transitions == first.transitions + 2
        assert lease.fencing_token > first.fencing_token
        live.release()
    finally:
        proc.kill()
        proc.wait()


async def test_cancelled_waiter_never_strands_the_grant(redis_server: RedisServer) -> None:
    """Cancel the waiter right when its grant is pushed: it either returns the lease or, if
    the cancellation wins, its clean-up passes the lease on."""
    sync = redis_server.client()
    for _ in range(5):
        ac = aioredis.Redis(port=redis_server.port)
        bc = aioredis.Redis(port=redis_server.port)
        a = aio.Lock(ac, "c", ttl=5, identity="a")
        b = aio.Lock(bc, "c", ttl=5, identity="b")
        await a.acquire()
        task = asyncio.create_task(b.acquire(timeout=10))
        await async_wait_until(lambda: asyncio.to_thread(_enlisted, sync, "c"))
        await a.release()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            third = aio.Lock(ac, "c", ttl=5, identity="third")
            await third.acquire(blocking=False)  # not stranded with the cancelled waiter
            await third.release()
        else:
            await b.release()
        assert (await a.state()).holder is None
        await ac.aclose()
        await bc.aclose()
    sync.close()


def test_functions_are_loaded_once_and_again_after_a_flush(redis_server: RedisServer) -> None:
    client = redis_server.client()
    lock = redlease.Lock(client, "f", ttl=5)
    with lock as first:
        pass
    run = scripting(client.connection_pool)
    if not run.functions:
        pytest.skip("this server has no Functions (Redis 6): EVALSHA is used")
    libs = client.execute_command("FUNCTION", "LIST", "LIBRARYNAME", scripts.LIBRARY_NAME)
    assert len(libs) == 1
    client.execute_command("FUNCTION", "FLUSH")  # a server that lost its functions
    with lock as lease:
        assert lease.fencing_token > first.fencing_token
    assert run.functions
    client.config_resetstat()
    with lock:
        pass
    stats = client.info("commandstats")
    assert stats["cmdstat_fcall"]["calls"] == 2 and "cmdstat_evalsha" not in stats


def test_scripting_falls_back_to_evalsha_without_functions() -> None:
    """Redis 6 says FUNCTION and FCALL are unknown commands: EVALSHA from then on, SCRIPT LOAD
    after NOSCRIPT."""
    run = policy.Scripting()
    call = requests.Call(scripts.STATUS, ("k",), ())
    assert run.command(call) == policy.LIBRARY_CHECK and not run.settled
    unknown = redis.ResponseError("unknown command `FUNCTION`, with args beginning with: ...")
    assert run.recover(call, policy.LIBRARY_CHECK, unknown) == (call.evalsha(),)
    assert run.command(call)[0] == "EVALSHA" and run.settled
    # another request sent FCALL before the first answer came: it falls back the same way
    assert run.recover(call, call.fcall(), unknown) == (call.evalsha(),)
    noscript = redis.exceptions.NoScriptError("No matching script. Please use EVAL.")
    load = ("SCRIPT", "LOAD", scripts.STATUS.lua)
    assert run.recover(call, call.evalsha(), noscript) == (load, call.evalsha())
    wrongtype = redis.ResponseError("WRONGTYPE Operation")
    assert run.recover(call, call.evalsha(), wrongtype) == ()
