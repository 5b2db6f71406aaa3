"""The lock flows: acquire, release and extend one lease, written once for sync and asyncio.

Each flow is a generator that yields :mod:`redlease.core.requests` (built by a
:class:`~redlease.core.primitives.Primitive`) and receives their replies; ``core._sync`` and
``core._async`` drive the same generators with a blocking or an asyncio Redis client, so the
two APIs cannot drift apart. Nothing here touches a socket or sleeps.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from redlease.core import scripts
from redlease.core.clock import Clock, ServerTime, clock_step
from redlease.core.pacing import Pacing
from redlease.core.primitives import Options, Primitive
from redlease.core.replies import (
    Outcome,
    as_int,
    decode_acquire,
    decode_extend,
    decode_handed,
    decode_release,
)
from redlease.core.requests import Flow, GaveUp, Replicate, Request, Wait
from redlease.core.timing import local_deadline
from redlease.errors import (
    AlreadyHeld,
    ClockStepped,
    NotOwned,
    ReplicationError,
)


@dataclass(slots=True)
class Grant:
    """What a successful acquisition returns (the public :class:`redlease.Lease` wraps it)."""

    fence: int
    count: int
    server_ms: int
    transitions: int
    sent_at: float
    deadline: float
    reentered: bool = False  # a re-entry of a reentrant hold, not a new lease
    received_at: float = 0.0  # monotonic time the grant arrived (0: not one server's reading)
    # granted after a refusal or handed over: the lock is contended, so its release expects
    # waiters (see :func:`release`)
    waited: bool = False

    def server_time(self) -> ServerTime | None:
        """The grant's reading of the server clock, if it is one server's."""
        if not self.received_at:
            return None
        return ServerTime(self.server_ms, self.sent_at, self.received_at)


@dataclass(slots=True)
class AcquireState:
    """What an interrupted acquire flow leaves for its clean-up (see :func:`abort_acquire`)."""

    registered: bool = False
    in_flight: bool = False
    granted: bool = False


def confirm_replicas(lock: str, key: str, opts: Options, what: str) -> Flow:
    """``WAIT`` for ``opts.replicas`` replicas on the node of ``key``; ReplicationError if fewer."""
    if not opts.replicas:
        return
    acked = yield Replicate(key, opts.replicas, _ms(opts.replica_timeout))
    if as_int(acked, lock, "replica count") < opts.replicas:
        raise ReplicationError(
            lock, f"only {acked} of {opts.replicas} replicas confirmed the {what}"
        )


LAST_ATTEMPT = -1  # registration ms of a waiter's last attempt (see scripts.ACQUIRE, ARGV[4])


def acquire(
    prim: Primitive,
    token: str,
    *,
    blocking: bool,
    timeout: float | None,
    state: AcquireState,
    clock: Clock = time.monotonic,
    socket_timeout: float | None = None,
    min_fence: int = 0,
) -> Generator[Request, Any, Grant]:
    """Try to acquire; when ``blocking``, wait for wake tokens until ``timeout`` (None: forever).

    One script per attempt, also for a multi-key lease on one node (``prim.group``). A failure
    after the grant (too few replicas) is undone by :func:`abort_acquire` (fail closed).
    """
    pacing = Pacing(
        prim.options, blocking=blocking, timeout=timeout, clock=clock, socket_timeout=socket_timeout
    )
    waited = False
    while True:
        wait_ms = _registration(prim, pacing, state)
        sent_at = clock()
        state.in_flight = True
        reply = yield prim.acquire(token, wait_ms, min_fence, state.registered)
        state.in_flight = False
        outcome = _outcome(prim, reply, wait_ms, state)
        if outcome.status == scripts.GRANTED:
            state.granted = True
            state.registered = False
            if outcome.transitions != -1:
                yield from confirm_replicas(prim.name, prim.keys.lease, prim.options, "acquisition")
            return _granted(prim, outcome, sent_at, clock, waited)
        if outcome.status == scripts.ALREADY:
            raise AlreadyHeld(prim.name, "already held by this owner (not a reentrant lock)")
        waited = True
        woke = yield from _wait_turn(prim, token, pacing, state, outcome)
        if woke is True or woke is False:
            continue
        if type(woke) is GaveUp:  # refused at or after the deadline, as a last attempt is
            state.registered = False
            pacing.give_up(prim.name, woke.holder)
        grant = yield from _handed(prim, token, woke, sent_at, state, clock)
        if grant is not None:
            return grant


def _registration(prim: Primitive, pacing: Pacing, state: AcquireState) -> int:
    """The waiter registration (ms) to send with the next attempt (0: none). A waiter's last
    attempt (direct hand-off, deadline reached) sends :data:`LAST_ATTEMPT`: refused, it leaves
    the queue in the same call."""
    wait_ms = pacing.attempt()
    if not wait_ms and pacing.blocking and state.registered and prim.direct:
        return LAST_ATTEMPT
    return wait_ms


def _outcome(prim: Primitive, reply: object, wait_ms: int, state: AcquireState) -> Outcome:
    """An attempt's decoded reply; a refused last attempt is no longer registered."""
    outcome = decode_acquire(reply, prim.name)
    if wait_ms == LAST_ATTEMPT and outcome.status == scripts.HELD:
        state.registered = False
    return outcome


def _granted(
    prim: Primitive, outcome: Outcome, sent_at: float, clock: Clock, waited: bool
) -> Grant:
    """The grant of an attempt the script granted (a re-entry has ``transitions`` -1)."""
    return Grant(
        fence=outcome.fence,
        count=outcome.count,
        server_ms=outcome.server_ms,
        transitions=outcome.transitions,
        sent_at=sent_at,
        deadline=local_deadline(sent_at, prim.options.ttl),
        reentered=outcome.transitions == -1,
        received_at=clock(),
        waited=waited,
    )


def _wait_turn(
    prim: Primitive, token: str, pacing: Pacing, state: AcquireState, outcome: Outcome
) -> Generator[Request, Any, Any]:
    """After a refused attempt: wait for a wake token or a lease handed over (raises when the
    pacing gives up). The wait that ends at the deadline of one lock (on one node, cluster slot
    or RedLock set) lets the listener give up for the waiter (see
    :class:`~redlease.core.requests.Wait`)."""
    state.registered = state.registered or pacing.registering
    wait = pacing.refused(prim.name, outcome, prim.names_at(outcome.blocked))
    keys = prim.wake_keys(outcome.blocked, token)
    if (
        prim.given_up_together
        and pacing.deadline is not None
        and pacing.clock() + wait >= pacing.deadline
    ):
        lease, grants = prim.keys.lease, prim.grants(token)
        return (yield Wait(keys, wait, grants, token, lease, prim.give_up(token)))
    return (yield Wait(keys, wait, prim.grants(token), token))


def _handed(
    prim: Primitive, token: str, woke: object, sent_at: float, state: AcquireState, clock: Clock
) -> Generator[Request, Any, Grant | None]:
    """A lease the release handed over directly (granted after the attempt sent at
    ``sent_at``). A hand-off grants at most :data:`~redlease.core.scripts.HANDED_MS` (so a
    waiter that died while enlisted holds the lock no longer, see core/lua/helpers/enlist.lua):
    the waiter confirms it here, extending it to its TTL, as it renews one after a wait longer
    than a third of the TTL. None if it expired before this waiter got to it (stopped,
    overloaded): the caller tries again."""
    state.granted = True
    state.registered = False
    handed = decode_handed(woke, prim.name)
    opts = prim.options
    if opts.ttl_ms <= scripts.HANDED_MS and clock() - sent_at <= opts.ttl / 3:
        yield from confirm_replicas(prim.name, prim.keys.lease, opts, "acquisition")
        return Grant(
            fence=handed.fence,
            count=1,
            server_ms=handed.server_ms,
            transitions=handed.transitions,
            sent_at=sent_at,
            deadline=local_deadline(sent_at, opts.ttl),
            received_at=clock(),
            waited=True,
        )
    try:
        deadline, reading = yield from extend(prim, token, clock=clock)
    except NotOwned:
        state.granted = False
        return None
    return Grant(
        fence=handed.fence,
        count=1,
        server_ms=reading.server_ms,
        transitions=handed.transitions,
        sent_at=reading.sent,
        deadline=deadline,
        received_at=reading.received,
        waited=True,
    )


def abort_acquire(prim: Primitive, token: str, state: AcquireState) -> Flow:
    """Clean up after an acquire flow that raised or was cancelled: leave no lease behind."""
    if state.in_flight or state.granted:
        # the script may have run although we never saw its reply: undo by owner token
        yield prim.release(token)
    if state.registered or state.in_flight:
        yield prim.leave(token)


def release(
    prim: Primitive,
    token: str,
    *,
    full: bool = True,
    quiet: Callable[[], object] | None = None,
) -> Generator[Request, Any, int]:
    """Release by owner token; returns the reentrancy count left. Raises :class:`NotOwned`.

    ``quiet``: no waiter is expected (see ``HandleCore._begin_release``). The release then
    sends RELEASE's short form, two keys instead of seven (about 8k fewer server instructions
    per pair, docs/scale.md); if waiters are registered after all, it did nothing, ``quiet``
    is called (the lock is contended) and the full form follows: one more round trip, the
    price of a wrong guess.
    """
    reply = yield prim.release(token, full, quiet is not None)
    if quiet is not None and reply == scripts.WAITERS:
        quiet()
        reply = yield prim.release(token, full)
    count = decode_release(reply, prim.name)
    if count is None:
        raise NotOwned(prim.name, "release refused: not held by this owner (expired or taken over)")
    return count


def extend(
    prim: Primitive,
    token: str,
    ttl: float | None = None,
    *,
    clock: Clock = time.monotonic,
    timeout: float | None = None,
    since: ServerTime | None = None,
) -> Generator[Request, Any, tuple[float, ServerTime]]:
    """Extend by owner token; returns ``(new local deadline, the server's clock reading)``.
    Raises NotOwned.

    ``timeout`` bounds the wait for the reply (a renewer never waits past its deadline).
    ``since``: the lease's last reading of the same server's clock; if the clock stepped since
    (:func:`clock_step`), the lease is given back and :class:`ClockStepped` raised: Redis
    expires by that clock, so the lease may have ended early and been granted to another.
    """
    opts = prim.options
    ttl = opts.ttl if ttl is None else ttl
    sent_at = clock()
    reply = yield prim.extend(token, max(1, round(ttl * 1000)), timeout)
    result = decode_extend(reply, prim.name)
    extended = result.ok
    reading = ServerTime(result.server_ms, sent_at, clock())
    step = 0.0 if since is None else clock_step(since, reading, opts.ttl)
    if step:
        if extended:
            yield prim.release(token)  # still ours: give it back, a standby may take over now
        way = "forward" if step > 0 else "back"
        raise ClockStepped(
            prim.name,
            f"the Redis server's clock stepped {way} by {abs(step):.3f}s since the last "
            "renewal: Redis expires leases by that clock, so the lease may have ended early; "
            "stepped down",
        )
    if not extended:
        raise NotOwned(prim.name, "extend refused: not held by this owner (expired or taken over)")
    yield from confirm_replicas(prim.name, prim.keys.lease, opts, "extension")
    return local_deadline(sent_at, ttl), reading


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def new_token() -> str:
    """A fresh owner token: 128 bits from :mod:`secrets`, hex-encoded."""
    return secrets.token_hex(16)
