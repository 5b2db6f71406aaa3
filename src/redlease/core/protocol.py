"""Sans-I/O lock logic shared by the sync and asyncio APIs.

Operations are written once, as generators that *yield* I/O requests (:class:`Call`,
:class:`Wait`, :class:`Replicate`) and receive their replies. ``core._sync`` and
``core._async`` drive the same generators with a blocking or an asyncio Redis client, so the
two APIs cannot drift apart. Nothing here touches a socket or sleeps.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from redlease.core import scripts
from redlease.core.keys import LockKeys
from redlease.errors import (
    AlreadyHeld,
    LockContention,
    LockTimeout,
    NotOwned,
    ProtocolError,
    ReplicationError,
)

Clock = Callable[[], float]


# --- I/O requests --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    """Run ``script`` with ``keys`` and ``args``; the reply is the script's raw result."""

    script: scripts.Script
    keys: Sequence[str]
    args: Sequence[str | int]


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until a wake token arrives on ``key`` or ``timeout`` seconds pass (BLPOP).

    The reply is ``True`` if a token was popped, ``False`` on timeout.
    """

    key: str
    timeout: float


@dataclass(frozen=True, slots=True)
class Replicate:
    """``WAIT replicas timeout_ms`` on the node of ``key``; the reply is the replica count."""

    key: str
    replicas: int
    timeout_ms: int


Request = Call | Wait | Replicate
Flow = Generator[Request, Any, Any]


# --- timing --------------------------------------------------------------------------------------


def drift(ttl: float) -> float:
    """Clock-drift allowance for a lease of ``ttl`` seconds: 1% of the TTL plus 2 ms."""
    return ttl * 0.01 + 0.002


def local_deadline(sent_at: float, ttl: float) -> float:
    """Monotonic time after which a lease granted to a request sent at ``sent_at`` is void.

    Measured from when the request was *sent* (the server may have started the TTL any time
    after that), minus the drift allowance.
    """
    return sent_at + ttl - drift(ttl)


# --- reply decoding ------------------------------------------------------------------------------


def as_int(value: object, lock: str, what: str) -> int:
    """Decode an integer from a Redis reply (int, bytes or str)."""
    if type(value) is int:  # the common case, kept cheap: this runs on every reply
        return value
    try:
        if isinstance(value, bytes):
            return int(value.decode())
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        raise ProtocolError(lock, f"unexpected {what} in Redis reply: {value!r}") from None


def as_str(value: object) -> str:
    """Decode a string from a Redis reply (bytes or str); ``None``/``False`` give ``''``."""
    if value is None or value is False:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def as_list(value: object, lock: str, length: int) -> list[Any]:
    """Check that a script reply is a list of at least ``length`` items."""
    if not isinstance(value, list) or len(value) < length:
        raise ProtocolError(lock, f"unexpected Redis reply: {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Outcome:
    """A decoded acquire reply."""

    status: int
    fence: int = 0
    count: int = 0
    server_ms: int = 0
    transitions: int = 0
    wait_hint_ms: int = -1
    holder: str | None = None


def decode_acquire(reply: object, lock: str) -> Outcome:
    items = as_list(reply, lock, 2)
    status = as_int(items[0], lock, "status")
    if status == scripts.GRANTED:
        if len(items) < 4:
            raise ProtocolError(lock, f"unexpected Redis reply: {reply!r}")
        transitions = as_int(items[4], lock, "transitions") if len(items) > 4 else 0
        return Outcome(
            status,
            fence=as_int(items[1], lock, "fence"),
            count=as_int(items[2], lock, "count"),
            server_ms=as_int(items[3], lock, "time"),
            transitions=transitions,
        )
    if status == scripts.ALREADY:
        return Outcome(status, fence=as_int(items[1], lock, "fence"))
    if status in (scripts.HELD, scripts.RESERVED):
        holder = as_str(items[2]) if len(items) > 2 else ""
        return Outcome(status, wait_hint_ms=as_int(items[1], lock, "ttl"), holder=holder or None)
    raise ProtocolError(lock, f"unknown acquire status {status}")


# --- primitives ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    """Per-lock settings shared by every primitive (seconds unless named otherwise)."""

    ttl: float = 30.0
    identity: str = ""
    handoff: float = 0.25  # how long a released lock stays reserved for woken waiters
    max_wait_step: float = 5.0  # longest single BLPOP; a bounded fallback, not a poll
    registration_grace: float = 0.5  # a waiter's registration outlives its BLPOP by this much
    replicas: int = 0  # WAIT for this many replicas after writes; fail closed if fewer
    replica_timeout: float = 0.1

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl * 1000))

    @property
    def handoff_ms(self) -> int:
        return max(1, round(min(self.handoff, self.ttl) * 1000))


@dataclass(frozen=True, slots=True)
class Primitive:
    """How one kind of lease maps to scripts: exclusive (mutex, reentrant, writer) or shared."""

    keys: LockKeys
    options: Options
    kind: str  # "mutex" | "reentrant" | "write" | "read"

    @property
    def name(self) -> str:
        return self.keys.name

    @property
    def shared(self) -> bool:
        return self.kind == "read"

    def acquire(self, token: str, wait_ms: int, min_fence: int = 0) -> Call:
        k, o = self.keys, self.options
        if self.kind == "read":
            return Call(
                scripts.ACQUIRE_READ,
                (k.lease, k.readers, k.writers_waiting, k.waiters, k.handoff, k.fence),
                (token, o.ttl_ms, wait_ms),
            )
        if self.kind == "write":
            return Call(
                scripts.ACQUIRE_WRITE,
                (
                    k.lease,
                    k.readers,
                    k.writers_waiting,
                    k.waiters,
                    k.handoff,
                    k.fence,
                    k.history,
                ),
                (token, o.ttl_ms, o.identity, wait_ms),
            )
        reentrant = "1" if self.kind == "reentrant" else "0"
        return Call(
            scripts.ACQUIRE,
            (k.lease, k.fence, k.history, k.waiters, k.handoff),
            (token, o.ttl_ms, o.identity, reentrant, wait_ms, min_fence),
        )

    def release(self, token: str, full: bool = True) -> Call:
        k, o = self.keys, self.options
        if self.kind == "read":
            return Call(
                scripts.RELEASE_READ,
                (k.readers, k.waiters, k.handoff, k.wake),
                (token, o.handoff_ms),
            )
        wake_all = "1" if self.kind == "write" else "0"
        return Call(
            scripts.RELEASE,
            (k.lease, k.waiters, k.handoff, k.wake),
            (token, "1" if full else "0", o.handoff_ms, wake_all),
        )

    def extend(self, token: str, ttl_ms: int) -> Call:
        if self.kind == "read":
            return Call(scripts.EXTEND_READ, (self.keys.readers,), (token, ttl_ms))
        return Call(scripts.EXTEND, (self.keys.lease,), (token, ttl_ms))

    def leave(self, token: str) -> Call:
        k = self.keys
        return Call(
            scripts.LEAVE,
            (k.lease, k.waiters, k.handoff, k.wake, k.writers_waiting),
            (token, self.options.handoff_ms),
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


@dataclass(slots=True)
class AcquireState:
    """What an interrupted acquire flow leaves for its clean-up (see :func:`abort_acquire`)."""

    registered: bool = False
    in_flight: bool = False
    granted: bool = False


# --- flows ---------------------------------------------------------------------------------------


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

    Honest timeouts: the flow only gives up after a final attempt made at or after the deadline.
    """
    opts = prim.options
    deadline = None if timeout is None else clock() + max(0.0, timeout)
    max_step = opts.max_wait_step
    if socket_timeout:
        max_step = min(max_step, socket_timeout * 0.8)
    step = max_step
    while True:
        remaining = None if deadline is None else deadline - clock()
        register = blocking and (remaining is None or remaining > 0)
        step = max_step if remaining is None else min(max_step, max(remaining, 0.0))
        wait_ms = round((step + opts.registration_grace) * 1000) if register else 0
        sent_at = clock()
        state.in_flight = True
        reply = yield prim.acquire(token, wait_ms, min_fence)
        state.in_flight = False
        outcome = decode_acquire(reply, prim.name)
        if outcome.status == scripts.GRANTED:
            state.granted = True
            state.registered = False
            if opts.replicas and outcome.transitions != -1:
                acked = yield Replicate(prim.keys.lease, opts.replicas, _ms(opts.replica_timeout))
                if as_int(acked, prim.name, "replica count") < opts.replicas:
                    yield prim.release(token)
                    state.granted = False
                    raise ReplicationError(
                        prim.name,
                        f"only {acked} of {opts.replicas} replicas confirmed the acquisition; "
                        "released (fail closed)",
                    )
            return Grant(
                fence=outcome.fence,
                count=outcome.count,
                server_ms=outcome.server_ms,
                transitions=outcome.transitions,
                sent_at=sent_at,
                deadline=local_deadline(sent_at, opts.ttl),
                reentered=outcome.transitions == -1,
            )
        if outcome.status == scripts.ALREADY:
            raise AlreadyHeld(prim.name, "already held by this owner (not a reentrant lock)")
        state.registered = state.registered or register
        if not register:
            if blocking:
                raise LockTimeout(
                    prim.name, f"not acquired within {timeout:.3f}s", holder=outcome.holder
                )
            raise LockContention(prim.name, holder=outcome.holder)
        wait = step
        if outcome.wait_hint_ms >= 0:
            # wake at the holder's expiry even if nobody releases (crashed holder)
            wait = min(wait, outcome.wait_hint_ms / 1000 + 0.001)
        yield Wait(prim.keys.wake, max(wait, 0.001))


def abort_acquire(prim: Primitive, token: str, state: AcquireState) -> Flow:
    """Clean up after an acquire flow that raised or was cancelled: leave no lease behind."""
    if state.in_flight or state.granted:
        # the script may have run although we never saw its reply: undo by owner token
        yield prim.release(token)
    if state.registered or state.in_flight:
        yield prim.leave(token)


def release(prim: Primitive, token: str, *, full: bool = True) -> Generator[Request, Any, int]:
    """Release by owner token; returns the reentrancy count left. Raises :class:`NotOwned`."""
    reply = yield prim.release(token, full)
    items = as_list(reply, prim.name, 2)
    if as_int(items[0], prim.name, "status") != 1:
        raise NotOwned(prim.name, "release refused: not held by this owner (expired or taken over)")
    return as_int(items[1], prim.name, "count")


def extend(
    prim: Primitive, token: str, ttl: float | None = None, *, clock: Clock = time.monotonic
) -> Generator[Request, Any, tuple[float, int]]:
    """Extend by owner token; returns ``(new local deadline, server ms)``. Raises NotOwned."""
    opts = prim.options
    ttl = opts.ttl if ttl is None else ttl
    sent_at = clock()
    reply = yield prim.extend(token, max(1, round(ttl * 1000)))
    items = as_list(reply, prim.name, 3)
    if as_int(items[0], prim.name, "status") != 1:
        raise NotOwned(prim.name, "extend refused: not held by this owner (expired or taken over)")
    if opts.replicas:
        acked = yield Replicate(prim.keys.lease, opts.replicas, _ms(opts.replica_timeout))
        if as_int(acked, prim.name, "replica count") < opts.replicas:
            raise ReplicationError(
                prim.name, f"only {acked} of {opts.replicas} replicas confirmed the extension"
            )
    return local_deadline(sent_at, ttl), as_int(items[2], prim.name, "time")


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def new_token() -> str:
    """A fresh owner token: 128 bits from :mod:`secrets`, hex-encoded."""
    return secrets.token_hex(16)
