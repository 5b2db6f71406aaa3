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
from dataclasses import dataclass, replace
from typing import Any

from redlease.core import scripts
from redlease.core.intents import (
    Acquire,
    Extend,
    Intent,
    Leave,
    RaiseFence,
    Release,
)
from redlease.core.keys import LockKeys
from redlease.core.replies import (
    Outcome,
    as_int,
    as_str,
    decode_acquire,
    decode_extend,
    decode_handed,
    decode_release,
)
from redlease.errors import (
    AlreadyHeld,
    ClockStepped,
    ConfigError,
    LockContention,
    LockTimeout,
    NotOwned,
    ReplicationError,
)

Clock = Callable[[], float]


# --- I/O requests --------------------------------------------------------------------------------


# not frozen: one is made for every request, and a frozen dataclass's __init__ costs 4x
@dataclass(slots=True)
class Call:
    """Run ``script`` with ``keys`` and ``args``; the reply is the script's raw result.

    ``owner``: the owner token the request acts for. A driver writes a request of an owner behind
    that owner's earlier requests to the same node that are still unanswered (same connection),
    so an undo can never overtake the request it undoes. ``timeout``: the longest to wait for
    the reply (``None``: the client's socket timeout). ``intent``: what the call means, for a
    layer that runs it on several nodes (:mod:`redlease.core.intents`).
    """

    script: scripts.Script
    keys: Sequence[str]
    args: Sequence[str | int]
    owner: str = ""
    timeout: float | None = None
    intent: Intent | None = None

    def evalsha(self) -> tuple[str | int, ...]:
        """The Redis command that runs the script by its SHA1 (the usual case)."""
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def eval(self) -> tuple[str | int, ...]:
        """The Redis command that runs the script from source (after a NOSCRIPT reply)."""
        return ("EVAL", self.script.lua, len(self.keys), *self.keys, *self.args)

    def fcall(self) -> tuple[str | int, ...]:
        """The Redis command that runs the script as a function of the redlease library."""
        return ("FCALL", self.script.function, len(self.keys), *self.keys, *self.args)

    def command(self, functions: bool) -> tuple[str | int, ...]:
        """FCALL where the server has the redlease library loaded (``functions``), else
        EVALSHA: the one rule for which of the two to send."""
        return self.fcall() if functions else self.evalsha()


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until a wake token arrives on one of ``keys`` (wake lists on one node) or
    ``timeout`` seconds pass (BLPOP). The reply is ``True`` if a token was popped, else ``False``;
    a lease handed over directly (popped from ``grants``, one of ``keys``) is the reply itself.

    The waiters of one lock in one process share one listener (:mod:`redlease.core.waiting`):
    ``grants`` is then their process's mailbox, where each grant names its ``owner``.
    """

    keys: tuple[str, ...]
    timeout: float
    grants: str = ""
    owner: str = ""
    # The wait that ends at the waiter's deadline (direct hand-off only): the listener may give
    # up for it, replying :class:`GaveUp` when ``lease`` has another owner at or after the
    # deadline (what a last attempt would have been told) and running ``leave`` itself.
    lease: str = ""
    leave: Call | None = None

    def reply(self, popped: Any) -> Any:
        """The reply for a BLPOP that returned ``popped`` ([key, value], or None: timed out)."""
        if not popped:
            return False
        if self.grants and as_str(popped[0]) == self.grants:
            return popped[1]
        return True


@dataclass(frozen=True, slots=True)
class Replicate:
    """``WAIT replicas timeout_ms`` on the node of ``key``; the reply is the replica count."""

    key: str
    replicas: int
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class GaveUp:
    """A :class:`Wait`'s reply when its listener gave up for the waiter: at or after the
    waiter's deadline the lease had another owner (held by ``holder``), and the listener takes
    the waiter's registration off the queue (its LEAVE passes on a lease granted meanwhile)."""

    holder: str | None = None


Request = Call | Wait | Replicate
Flow = Generator[Request, Any, Any]


def resume(
    flow: Flow, reply: Any = None, error: BaseException | None = None
) -> tuple[Request | None, Any]:
    """Advance ``flow`` with the reply to its last request, or throw that request's ``error``
    into it. Returns ``(next request, None)``, or ``(None, result)`` once the flow is done.
    Every driver runs flows with this, so they all treat replies and errors alike."""
    try:
        return (flow.send(reply) if error is None else flow.throw(error)), None
    except StopIteration as stop:
        return None, stop.value


# --- timing --------------------------------------------------------------------------------------


def drift(ttl: float) -> float:
    """Clock-drift allowance for a lease of ``ttl`` seconds: 1% of the TTL plus 2 ms."""
    return ttl * 0.01 + 0.002


@dataclass(frozen=True, slots=True)
class ServerTime:
    """One reading of a server's clock: ``server_ms`` (``TIME`` in a script) was read between
    ``sent`` and ``received`` on the local monotonic clock."""

    server_ms: int
    sent: float
    received: float


def clock_step(before: ServerTime, after: ServerTime, ttl: float) -> float:
    """Seconds the server's wall clock moved between two readings beyond what the local
    monotonic clock allows: > 0 a forward step, < 0 a backward one, 0 within the drift allowance
    (:func:`drift` of the longer of the TTL and the interval, plus 2 ms for two readings in
    whole milliseconds). Sound under any load: each reading lies inside its own interval."""
    moved = (after.server_ms - before.server_ms) / 1000
    longest = after.received - before.sent
    shortest = after.sent - before.received
    slack = drift(max(ttl, longest)) + 0.002
    if moved > longest + slack:
        return moved - longest
    if moved < shortest - slack:
        return moved - shortest
    return 0.0


def local_deadline(sent_at: float, ttl: float) -> float:
    """Monotonic time after which a lease granted to a request sent at ``sent_at`` is void.

    Measured from when the request was *sent* (the server may have started the TTL any time
    after that), minus the drift allowance.
    """
    return sent_at + ttl - drift(ttl)


# --- primitives ----------------------------------------------------------------------------------


DEFAULT_REPLICA_TIMEOUT = 0.1  # seconds a WAIT may take before the write counts as unconfirmed


def validate_replication(
    replicas: object,
    timeout: object,
    names: tuple[str, str] = ("replicas", "replica_timeout"),
) -> tuple[int, float]:
    """``replicas`` (an integer >= 0: WAIT for that many replicas after every grant and
    extension, fail closed if fewer confirm) and the WAIT timeout in seconds (> 0); errors
    name ``names`` (the argument, the flag or the spec field)."""
    replicas_name, timeout_name = names
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ConfigError(replicas_name, f"must be an integer >= 0, got {replicas!r}")
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout < float("inf")
    ):
        raise ConfigError(timeout_name, f"must be > 0 seconds, got {timeout!r}")
    return replicas, float(timeout)


@dataclass(frozen=True, slots=True)
class Options:
    """Per-lock settings shared by every primitive (seconds unless named otherwise)."""

    ttl: float = 30.0
    identity: str = ""
    handoff: float = 0.25  # how long a released lock stays reserved for woken waiters
    max_wait_step: float = 5.0  # longest single BLPOP; a bounded fallback, not a poll
    registration_grace: float = 0.5  # a waiter's registration outlives its BLPOP by this much
    replicas: int = 0  # WAIT for this many replicas after writes; fail closed if fewer
    replica_timeout: float = DEFAULT_REPLICA_TIMEOUT

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl * 1000))

    @property
    def handoff_ms(self) -> int:
        return max(1, round(min(self.handoff, self.ttl) * 1000))


@dataclass(frozen=True, slots=True)
class Primitive:
    """How one kind of lease maps to scripts: exclusive (mutex, reentrant, writer) or shared.

    ``group``: several locks held together as one lease, all on one node (a multi-key lease:
    the exclusive scripts take each lock's keys in turn and act on all of them at once); empty
    for a lease on ``keys`` alone. Every request carries its owner token (see :class:`Call`).
    ``direct``: the direct hand-off (one exclusive lock on one node or cluster slot, see
    :meth:`with_direct`): a waiter enlists, the release grants it the lease and pushes the grant
    onto the waiter's own list, and the waiter returns without another acquire.
    """

    keys: LockKeys
    options: Options
    kind: str  # "mutex" | "reentrant" | "write" | "read"
    group: tuple[LockKeys, ...] = ()
    direct: bool = False  # a release hands the lease to the head waiter itself (one node)
    mailbox: str = ""  # with ``direct``: the process's mailbox id for this lock ('': own lists)

    def with_direct(self, mailbox: str = "") -> Primitive:
        """This primitive with the direct hand-off, where it applies (mutex or reentrant, one
        lock); RedLock quorums and read-write locks keep the wake-up hand-off. ``mailbox``: the
        id of the list where this process's listener receives every grant of the lock."""
        if self.group or self.kind not in ("mutex", "reentrant"):
            return self
        return replace(self, direct=True, mailbox=mailbox)

    def grants(self, token: str) -> str:
        """The list where ``token`` receives a lease handed over directly ('' : none): the
        process's mailbox when there is one, else the waiter's own list."""
        if not self.direct:
            return ""
        return self.keys.grants(self.mailbox or token)

    @property
    def name(self) -> str:
        return ",".join(k.name for k in self.group) if self.group else self.keys.name

    @property
    def shared(self) -> bool:
        return self.kind == "read"

    def each(self, pick: Callable[[LockKeys], tuple[str, ...]]) -> tuple[str, ...]:
        """``pick``'s keys of every lock of the lease, lock after lock."""
        if not self.group:
            return pick(self.keys)
        return tuple(key for keys in self.group for key in pick(keys))

    def names_at(self, positions: Sequence[int]) -> str:
        """The names of the locks of a multi-key lease at 1-based ``positions`` (for messages);
        ``''`` for a single lock."""
        return ", ".join(repr(self.group[i - 1].name) for i in positions) if self.group else ""

    def wake_keys(self, blocked: Sequence[int] = (), token: str = "") -> tuple[str, ...]:
        """The wake lists to wait on: those of the locks at 1-based positions ``blocked``
        (where the refused acquire registered), or of every lock; with the direct hand-off,
        ``token``'s own grant list first."""
        if self.direct and token:
            return (self.grants(token), self.keys.wake)
        locks = self.group or (self.keys,)
        return tuple(locks[i - 1].wake for i in blocked) or tuple(k.wake for k in locks)

    def acquire(
        self, token: str, wait_ms: int, min_fence: int = 0, registered: bool = True
    ) -> Call:
        """``registered``: the owner may be registered as a waiter (False spares the script a
        look at the waiters when the lock is not reserved)."""
        k, o = self.keys, self.options
        if self.kind == "read":
            return Call(
                scripts.ACQUIRE_READ,
                (k.lease, k.readers, k.writers_waiting, k.waiters, k.handoff, k.fence),
                (token, o.ttl_ms, wait_ms),
                token,
                intent=Acquire(token, o.ttl_ms),
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
                token,
                intent=Acquire(token, o.ttl_ms),
            )
        reentrant = "1" if self.kind == "reentrant" else "0"
        keys = self.each(lambda k: (k.lease, k.fence, k.history, k.waiters, k.handoff))
        args: tuple[str | int, ...] = (
            token,
            o.ttl_ms,
            o.identity,
            reentrant,
            wait_ms,
            min_fence,
            "1" if registered else "0",
        )
        if self.direct:
            keys += (k.direct, k.grants(token))
            if self.mailbox:
                args += (self.mailbox,)
        return Call(scripts.ACQUIRE, keys, args, token, intent=Acquire(token, o.ttl_ms))

    def release(self, token: str, full: bool = True) -> Call:
        k, o = self.keys, self.options
        if self.kind == "read":
            return Call(
                scripts.RELEASE_READ,
                (k.readers, k.waiters, k.handoff, k.wake),
                (token, o.handoff_ms),
                token,
                intent=Release(),
            )
        wake_all = "1" if self.kind == "write" else "0"
        keys = self.each(lambda k: (k.lease, k.waiters, k.handoff, k.wake))
        if self.direct:
            keys += (k.fence, k.history, k.direct)
        return Call(
            scripts.RELEASE,
            keys,
            (token, "1" if full else "0", o.handoff_ms, wake_all),
            token,
            intent=Release(),
        )

    def extend(self, token: str, ttl_ms: int, timeout: float | None = None) -> Call:
        if self.kind == "read":
            return Call(
                scripts.EXTEND_READ,
                (self.keys.readers,),
                (token, ttl_ms),
                token,
                timeout,
                Extend(ttl_ms),
            )
        leases = self.each(lambda k: (k.lease,))
        return Call(scripts.EXTEND, leases, (token, ttl_ms), token, timeout, Extend(ttl_ms))

    def leave(self, token: str) -> Call:
        k = self.keys
        keys = self.each(lambda k: (k.lease, k.waiters, k.handoff, k.wake, k.writers_waiting))
        if self.direct:
            keys += (k.fence, k.history, k.direct, k.grants(token))
        return Call(
            scripts.LEAVE,
            keys,
            (token, self.options.handoff_ms),
            token,
            intent=Leave(),
        )

    def raise_fence(self, token: str, fence: int) -> Call:
        """Raise this lock's fence counter, and the owner's lease record, to ``fence``."""
        return Call(
            scripts.RAISE_FENCE,
            (self.keys.fence, self.keys.lease),
            (fence, token),
            token,
            intent=RaiseFence(fence),
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


# --- flows ---------------------------------------------------------------------------------------


class Pacing:
    """The timing of one acquisition: when it registers as a waiter, how long each wait for a
    wake token may last, when it gives up. Honest timeouts: it gives up only after an attempt
    made at or after the deadline. Shared by every acquire flow."""

    def __init__(
        self,
        opts: Options,
        *,
        blocking: bool,
        timeout: float | None,
        clock: Clock,
        socket_timeout: float | None,
    ) -> None:
        self.opts = opts
        self.blocking = blocking
        self.timeout = timeout
        self.clock = clock
        self.deadline = None if timeout is None else clock() + max(0.0, timeout)
        self.max_step = opts.max_wait_step
        if socket_timeout:  # one BLPOP must not outlast the socket timeout
            self.max_step = min(self.max_step, socket_timeout * 0.8)
        self.step = self.max_step
        self.registering = False

    def attempt(self) -> int:
        """Start an attempt: the waiter registration (ms) to send with it (0: do not register)."""
        remaining = None if self.deadline is None else self.deadline - self.clock()
        self.registering = self.blocking and (remaining is None or remaining > 0)
        self.step = self.max_step if remaining is None else min(self.max_step, max(remaining, 0.0))
        return round((self.step + self.opts.registration_grace) * 1000) if self.registering else 0

    def refused(self, lock: str, outcome: Outcome, what: str = "") -> float:
        """After a refused attempt: seconds to wait for a wake token, or raise LockTimeout
        (blocking, deadline reached) or LockContention (non-blocking). ``what`` names the lock
        that refused, when that is not ``lock`` itself."""
        if not self.registering:
            where = f"{what} " if what else ""
            if self.blocking:
                raise LockTimeout(
                    lock,
                    f"{where}not acquired within {self.timeout:.3f}s",
                    holder=outcome.holder,
                )
            raise LockContention(lock, f"{where}held by another owner", holder=outcome.holder)
        wait = self.step
        if self.deadline is not None:  # the reply took time: the wait still ends at the deadline
            wait = min(wait, self.deadline - self.clock())
        if outcome.wait_hint_ms >= 0:
            # wake at the holder's expiry even if nobody releases (crashed holder)
            wait = min(wait, outcome.wait_hint_ms / 1000 + 0.001)
        return max(wait, 0.001)


def confirm_replicas(lock: str, key: str, opts: Options, what: str) -> Flow:
    """``WAIT`` for ``opts.replicas`` replicas on the node of ``key``; ReplicationError if fewer."""
    if not opts.replicas:
        return
    acked = yield Replicate(key, opts.replicas, _ms(opts.replica_timeout))
    if as_int(acked, lock, "replica count") < opts.replicas:
        raise ReplicationError(
            lock, f"only {acked} of {opts.replicas} replicas confirmed the {what}"
        )


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
    opts = prim.options
    pacing = Pacing(
        opts, blocking=blocking, timeout=timeout, clock=clock, socket_timeout=socket_timeout
    )
    while True:
        wait_ms = pacing.attempt()
        if not wait_ms and blocking and state.registered and prim.direct:
            wait_ms = LAST_ATTEMPT  # refused by a holder, it leaves the queue in the same call
        sent_at = clock()
        state.in_flight = True
        reply = yield prim.acquire(token, wait_ms, min_fence, state.registered)
        state.in_flight = False
        outcome = decode_acquire(reply, prim.name)
        if wait_ms == LAST_ATTEMPT and outcome.status == scripts.HELD:
            state.registered = False
        if outcome.status == scripts.GRANTED:
            state.granted = True
            state.registered = False
            if outcome.transitions != -1:
                yield from confirm_replicas(prim.name, prim.keys.lease, opts, "acquisition")
            return Grant(
                fence=outcome.fence,
                count=outcome.count,
                server_ms=outcome.server_ms,
                transitions=outcome.transitions,
                sent_at=sent_at,
                deadline=local_deadline(sent_at, opts.ttl),
                reentered=outcome.transitions == -1,
                received_at=clock(),
            )
        if outcome.status == scripts.ALREADY:
            raise AlreadyHeld(prim.name, "already held by this owner (not a reentrant lock)")
        state.registered = state.registered or pacing.registering
        wait = pacing.refused(prim.name, outcome, prim.names_at(outcome.blocked))
        keys = prim.wake_keys(outcome.blocked, token)
        if prim.direct and pacing.deadline is not None and clock() + wait >= pacing.deadline:
            woke = yield Wait(
                keys, wait, prim.grants(token), token, prim.keys.lease, prim.leave(token)
            )
        else:
            woke = yield Wait(keys, wait, prim.grants(token), token)
        if woke is True or woke is False:
            continue
        if type(woke) is GaveUp:  # refused at or after the deadline, as a last attempt is
            state.registered = False
            pacing.registering = False
            pacing.refused(prim.name, Outcome(scripts.HELD, holder=woke.holder))  # raises
            continue
        # handed over directly by the release: granted after this attempt was sent
        state.granted = True
        state.registered = False
        handed = decode_handed(woke, prim.name)
        deadline = local_deadline(sent_at, opts.ttl)
        if clock() - sent_at > opts.ttl / 3:  # a long wait: renew for a full deadline
            try:
                deadline, _ = yield from extend(prim, token, clock=clock)
            except NotOwned:  # expired before this waiter got to it (stopped, overloaded)
                state.granted = False
                continue
        else:
            yield from confirm_replicas(prim.name, prim.keys.lease, opts, "acquisition")
        return Grant(
            fence=handed.fence,
            count=1,
            server_ms=handed.server_ms,
            transitions=handed.transitions,
            sent_at=sent_at,
            deadline=deadline,
            received_at=clock(),
        )


LAST_ATTEMPT = -1  # registration ms of a waiter's last attempt (see scripts.ACQUIRE, ARGV[5])


def abort_acquire(prim: Primitive, token: str, state: AcquireState) -> Flow:
    """Clean up after an acquire flow that raised or was cancelled: leave no lease behind."""
    if state.in_flight or state.granted:
        # the script may have run although we never saw its reply: undo by owner token
        yield prim.release(token)
    if state.registered or state.in_flight:
        yield prim.leave(token)


def release(prim: Primitive, token: str, *, full: bool = True) -> Generator[Request, Any, int]:
    """Release by owner token; returns the reentrancy count left. Raises :class:`NotOwned`."""
    count = decode_release((yield prim.release(token, full)), prim.name)
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
