"""Lock primitives: a lock's settings and how each kind of lease maps to script calls.

:class:`Primitive` builds the :class:`~redlease.core.requests.Call` of every step (acquire,
release, extend, leave, give up, raise the fence) for an exclusive (mutex, reentrant, writer) or
shared (reader) lease, one lock or several on one node; :class:`Options` holds the per-lock
settings.
Pure: the flows (:mod:`redlease.core.flows`) yield these calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from redlease.core import scripts
from redlease.core.intents import (
    Acquire,
    Extend,
    Leave,
    RaiseFence,
    Release,
)
from redlease.core.keys import LockKeys
from redlease.core.requests import Call, Wait
from redlease.core.timing import DEFAULT_TTL
from redlease.errors import ConfigError

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

    ttl: float = float(DEFAULT_TTL)
    identity: str = ""
    handoff: float = 0.25  # how long a released lock stays reserved for woken waiters
    max_wait_step: float = 5.0  # longest single BLPOP; a bounded fallback, not a poll
    registration_grace: float = 0.5  # a waiter's registration outlives its BLPOP by this much
    replicas: int = 0  # WAIT for this many replicas after writes; fail closed if fewer
    replica_timeout: float = DEFAULT_REPLICA_TIMEOUT
    # None: the fence counter and history keep no TTL (DESIGN's rule); else seconds they outlive
    # the lease by (docs/safety.md, "Forgotten counters")
    forget_after: float | None = None

    @property
    def ttl_ms(self) -> int:
        return max(1, round(self.ttl * 1000))

    @property
    def forget_ms(self) -> int:
        """``forget_after`` in ms (0: off), the scripts' ``forget`` argument."""
        return 0 if self.forget_after is None else max(1, round(self.forget_after * 1000))

    @property
    def handoff_ms(self) -> int:
        return max(1, round(min(self.handoff, self.ttl) * 1000))


@dataclass(frozen=True, slots=True)
class Primitive:
    """How one kind of lease maps to scripts: exclusive (mutex, reentrant, writer) or shared.

    ``group``: several locks held together as one lease, all on one node (a multi-key lease:
    the exclusive scripts take each lock's keys in turn and act on all of them at once); empty
    for a lease on ``keys`` alone. Every request carries its owner token (see :class:`Call`).
    ``limit``: a counting semaphore of that many slots, each a lease like the mutex's; the
    scripts grant the first free one and find an owner's by its token (a mutex is ``limit`` 1,
    the same calls without slot keys).
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
    single: bool = False  # one lock on one node or cluster slot (not a RedLock set, not a group)
    quorum: bool = False  # one lock on a RedLock node set (not a group): fences kept in step
    limit: int = 1  # a counting semaphore's slots (1: a mutex, the one-slot semaphore)

    @property
    def slots(self) -> tuple[str, ...]:
        """The lease keys of a semaphore's slots after slot 0 (``keys.lease``); none for a
        mutex. The scripts take them last, with their count (see lua/acquire_slot.lua)."""
        return self.keys.slots(self.limit)[1:] if self.limit > 1 else ()

    def with_direct(self, mailbox: str = "") -> Primitive:
        """This primitive on one node or cluster slot (``single``: its waiters' listener may
        read its lease and give up for them), with the direct hand-off where it applies (mutex
        or reentrant, one lock); read-write locks keep the wake-up hand-off, and RedLock
        quorums never get here. ``mailbox``: the id of the list where this process's listener
        receives every grant of the lock."""
        if self.group:
            return self
        if self.kind not in ("mutex", "reentrant"):
            return replace(self, single=True)
        return replace(self, direct=True, single=True, mailbox=mailbox)

    def on_quorum(self) -> Primitive:
        """This primitive on a RedLock node set (``quorum``: its nodes keep their fence counters
        in step, see ``grant`` in core/lua/helpers, and its waiters' listener may give up for
        them with one quorum read of its lease); a multi-key lease is left as it is."""
        return self if self.group else replace(self, quorum=True)

    @property
    def given_up_together(self) -> bool:
        """Whether its waiters' listener may give up for them at their deadline: one lock, on
        one node or cluster slot (``single``) or a RedLock set (``quorum``), one slot (a mutex:
        one slot's owner says nothing about a semaphore's other slots)."""
        return (self.single or self.quorum) and self.limit == 1

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
        """The acquire script by the lease's kind: ACQUIRE_READ, ACQUIRE_WRITE, ACQUIRE_MULTI
        (``group``), ACQUIRE_SLOT (a semaphore: ``limit`` > 1), else ACQUIRE (one mutex or
        reentrant lock). ``registered``: the owner may be registered as a waiter (False spares
        the script a look at the waiters when the lock is not reserved)."""
        k, o = self.keys, self.options
        intent = Acquire(token, o.ttl_ms)
        keys: tuple[str, ...]
        args: tuple[str | int, ...]
        if self.kind in ("read", "write"):
            keys = (k.lease, k.readers, k.writers_waiting, k.waiters, k.handoff, k.fence)
            if self.kind == "read":
                args = (token, o.ttl_ms, wait_ms)
                return Call(scripts.ACQUIRE_READ, keys, args, token, intent=intent)
            args = (token, o.ttl_ms, o.identity, wait_ms)
            return Call(scripts.ACQUIRE_WRITE, (*keys, k.history), args, token, intent=intent)
        if self.group:  # every lock's keys in turn; the registration ms alone (no mailbox)
            keys = self.each(lambda k: (k.lease, k.fence, k.history, k.waiters, k.handoff))
            args = (token, o.ttl_ms, o.identity, wait_ms, *(("1",) if registered else ()))
            return Call(scripts.ACQUIRE_MULTI, keys, args, token, intent=intent)
        keys = (k.lease, k.fence, k.history, k.waiters, k.handoff)
        if self.direct:  # the caller's grant list only where the script may clear it
            keys += (k.direct, k.grants(token)) if registered else (k.direct,)
        if self.quorum and not min_fence:
            min_fence = -1  # see grant in the Lua helpers
        # the registration carries the mailbox (read only when refused)
        wait = f"{wait_ms} {self.mailbox}" if self.mailbox and wait_ms else wait_ms
        args = (token, o.ttl_ms, o.identity, wait)
        if self.limit > 1:
            args += (min_fence, "1" if registered else "0", self.limit - 1)
            if o.forget_ms:
                args += (o.forget_ms,)
            return Call(scripts.ACQUIRE_SLOT, keys + self.slots, args, token, intent=intent)
        # ACQUIRE's later arguments have defaults in the script, and the trailing ones at
        # theirs are left out (each one costs the server about 1k instructions)
        if o.forget_ms:
            args += (
                min_fence,
                "1" if registered else "0",
                "1" if self.kind == "reentrant" else "0",
                o.forget_ms,
            )
        elif self.kind == "reentrant":
            args += (min_fence, "1" if registered else "0", "1")
        elif registered:
            args += (min_fence, "1")
        elif min_fence:
            args += (min_fence,)
        return Call(scripts.ACQUIRE, keys, args, token, intent=intent)

    def release(self, token: str, full: bool = True, quiet: bool = False) -> Call:
        """``quiet``: no waiter is expected, so a release of every count of one mutex or
        reentrant lock with the direct hand-off sends RELEASE's short form (the lease and
        waiters keys: see scripts.RELEASE), which does nothing when waiters are registered
        after all (flows.release then sends this full form)."""
        k, o = self.keys, self.options
        if quiet and full and self.direct and self.limit == 1:
            return Call(scripts.RELEASE, (k.lease, k.waiters), (token,), token, intent=Release())
        if self.kind == "read":
            return Call(
                scripts.RELEASE_READ,
                (k.readers, k.waiters, k.handoff, k.wake),
                (token, o.handoff_ms),
                token,
                intent=Release(),
            )
        keys = self.each(lambda k: (k.lease, k.waiters, k.handoff, k.wake))
        if self.direct:
            keys += (k.fence, k.history, k.direct)
        # every argument after the token has a default in the script: the trailing ones that
        # are at theirs are left out (each one costs the server ~1k instructions)
        forget = o.forget_ms if self.direct else 0  # a lease passed on forgets as ours does
        if self.limit > 1 or forget:
            keys += self.slots
            args: tuple[str | int, ...] = (
                token,
                o.handoff_ms,
                "1" if full else "0",
                "1" if self.kind == "write" else "0",
                self.limit - 1,
                *((forget,) if forget else ()),
            )
        elif self.kind == "write":
            args = (token, o.handoff_ms, "1" if full else "0", "1")
        elif not full:
            args = (token, o.handoff_ms, "0")
        elif o.handoff_ms != scripts.HANDOFF_MS:
            args = (token, o.handoff_ms)
        else:
            args = (token,)
        return Call(scripts.RELEASE, keys, args, token, intent=Release())

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
        args: tuple[str | int, ...]
        if self.limit > 1:
            leases, args = (self.keys.lease, *self.slots), (token, ttl_ms, "slots")
        else:
            leases, args = self.each(lambda k: (k.lease,)), (token, ttl_ms)
        forget = self.options.forget_ms
        if forget:  # one lock (handles refuse forget_after for a group): its keys move along
            leases += (self.keys.fence, self.keys.history)
            args = (token, ttl_ms, "slots" if self.limit > 1 else "", forget)
        return Call(scripts.EXTEND, leases, args, token, timeout, Extend(ttl_ms))

    def leave(self, token: str) -> Call:
        k = self.keys
        keys = self.each(lambda k: (k.lease, k.waiters, k.handoff, k.wake, k.writers_waiting))
        if self.direct:
            keys += (k.fence, k.history, k.direct, k.grants(token))
        args: tuple[str | int, ...] = (token, self.options.handoff_ms)
        if self.limit > 1:
            keys += self.slots
            args += (self.limit - 1,)
        if self.direct and self.options.forget_ms:  # a lease passed on forgets as ours does
            args += (() if self.limit > 1 else (0,)) + (self.options.forget_ms,)
        return Call(scripts.LEAVE, keys, args, token, intent=Leave())

    def give_up(self, token: str) -> Call:
        """The GIVE_UP of ``token``'s wait that ends at its deadline (one lock, one node or
        cluster slot): its listener runs it for every waiter of the lock due at once
        (:func:`give_up_together`)."""
        k = self.keys
        keys: tuple[str, ...] = (k.lease, k.waiters, k.handoff, k.wake, k.writers_waiting)
        if self.direct:
            keys += (k.direct,)
        return Call(scripts.GIVE_UP, keys, (self.options.handoff_ms, token))

    def raise_fence(self, token: str, fence: int) -> Call:
        """Raise this lock's fence counter, and the owner's lease record, to ``fence``; with
        ``forget_after``, a raised counter expires as a granted one does."""
        o = self.options
        keep: tuple[int, ...] = (o.ttl_ms + o.forget_ms,) if o.forget_ms else ()
        return Call(
            scripts.RAISE_FENCE,
            (self.keys.fence, self.keys.lease, *self.slots),
            (fence, token, *keep),
            token,
            intent=RaiseFence(fence),
        )


def give_up_together(waits: Sequence[Wait], timeout: float | None = None) -> Call:
    """One GIVE_UP for the ``waits`` of one lock's waiters due at once (those with a
    :attr:`~redlease.core.requests.Wait.give_up`, :meth:`Primitive.give_up`): the first one's
    keys and handoff time, every waiter's owner token. ``timeout``: the longest wait for its
    reply (it is sent at the waiters' deadline: their last attempt's grace)."""
    calls = [w.give_up for w in waits if w.give_up is not None]
    first = calls[0]
    args = (first.args[0], *(c.args[1] for c in calls))
    return Call(first.script, first.keys, args, timeout=timeout)
