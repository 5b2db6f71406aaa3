"""One candidate's campaign: the term machine run against a lock backend (asyncio).

client-go's ``LeaderElector.Run`` over its ``resourcelock.Interface``: :class:`Campaign` asks
:class:`~redlease.core.term.Election` what to do and when, does it through a
:class:`LockBackend` and tells its hooks when leading starts and stops. A backend is one lock
(a Redis lease: :mod:`redlease.election.redislease`; a Kubernetes Lease:
``redlease.kube.leaselock``), one typed method per verb; it answers every attempt with
:class:`Granted` or :class:`Refused`, and says which of its errors mean the lock is gone
(:meth:`LockBackend.loss`). Every attempt is bounded: by the term's deadline while leading, by
``acquire_timeout`` while acquiring. An optional :class:`Watcher` hears the holder each refusal
names (the public elector's ``on_new_leader``).

An owner with rules of its own (the sidecar: pause, preferred holder, drain, claim hold) gives a
:class:`Policy`: it decides whether and how long an acquire may wait, when a leader hands off,
and how long a lease whose term ended must be kept before it is given back. The owner may also
end a term itself (:meth:`Campaign.end`, with its reason) and wake the campaign when its rules
changed (:meth:`Campaign.wake`, e.g. a new DistributedLock spec).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from redlease.core.term import Action, Election

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
R_contra = TypeVar("R_contra", contravariant=True)

SHUTDOWN = "the campaign stopped"


@dataclass(frozen=True, slots=True)
class Granted(Generic[R_co]):
    """The lock is ours: the attempt was sent at monotonic ``sent_at``; ``deadline``: the
    lock's own local deadline (``inf``: only the elector's renew deadline bounds the term);
    ``record``: what the backend knows of it (a :class:`~redlease.core.lease.Lease`, a Lease
    record)."""

    sent_at: float
    record: R_co
    deadline: float = math.inf


@dataclass(frozen=True, slots=True)
class Refused:
    """Someone else holds the lock (``holder`` when the backend knows who): try again later.
    ``waited``: the attempt itself waited for a release (a blocking acquire), so that wait
    counts as the retry period: the next attempt is due a retry period after this one's send.
    """

    holder: str | None = None
    waited: bool = False


@dataclass(frozen=True, slots=True)
class Defer:
    """A policy's answer: make no attempt now; ask again in ``seconds`` (``reason``: why)."""

    seconds: float
    reason: str = ""


class LockBackend(Protocol[R_co]):
    """One lock an elector runs for (client-go's ``resourcelock.Interface``, its get and
    create-or-update folded into each attempt): one attempt per call, errors raised."""

    async def acquire(self, wait: float | None = None) -> Granted[R_co] | Refused:
        """Take the lock if it is free (or ours), waiting at most ``wait`` seconds for a
        release (None: the backend's own choice; a backend that cannot wait ignores it)."""
        ...

    async def renew(self) -> Granted[R_co] | Refused:
        """Extend our hold; :class:`Refused` (or an error :meth:`loss` names) if it is not ours."""
        ...

    async def release(self) -> bool:
        """Give the lock up if it is still ours; True if this call released it."""
        ...

    def loss(self, exc: BaseException) -> str | None:
        """Why an attempt's error means the lock is gone, or None to retry (transient)."""
        ...


class TermHooks(Protocol[R_contra]):
    """What a campaign tells its owner (client-go's callbacks); awaited inline, so start
    quickly: renewals wait for them."""

    async def started(self, granted: Granted[R_contra]) -> None:
        """This candidate leads from now on."""
        ...

    async def stopped(self, reason: str) -> None:
        """It leads no more: ``reason`` is why (:data:`SHUTDOWN` when the campaign ended)."""
        ...

    def released(self, outcome: bool | Exception) -> None:
        """After the campaign ended a term: True if the lock was given back, False if it was
        not ours any more, the error if giving it back failed (it then runs out by itself)."""
        ...


class Policy(Protocol):
    """The owner's rules for running and handing off (pure decisions, asked by the campaign;
    ``now`` is the campaign's monotonic clock)."""

    def acquire(self, now: float) -> float | Defer | None:
        """An acquire is due: how long it may wait for a release (None: the backend's own
        choice), or :class:`Defer`: make none now."""
        ...

    def hand_off(self, now: float) -> str | None:
        """Leading, before a renewal (or when woken): a reason to step down now, giving the
        lock back, or None to go on."""
        ...

    def release_after(self) -> float | None:
        """A term ended: the monotonic time before which its lock must not be given back (a
        claim of it published elsewhere may still be trusted), or None: give it back now.
        Asked again every retry period while the lock is kept (unrenewed); if the lock's own
        deadline comes first it is left to expire, not given back."""
        ...


class Eager:
    """The default :class:`Policy`: always run, never hand off, give the lock back at once."""

    def acquire(self, now: float) -> float | Defer | None:
        return None

    def hand_off(self, now: float) -> str | None:
        return None

    def release_after(self) -> float | None:
        return None


class Watcher(Protocol):
    """Who else holds the lock, as the attempts learn it (client-go's ``OnNewLeader`` source):
    optional beside the hooks, awaited inline."""

    async def held(self, holder: str | None) -> None:
        """An attempt was refused: ``holder`` holds the lock (None: the backend cannot say)."""
        ...


class Campaign(Generic[R]):
    """Runs for ``backend`` until stopped (see the module docstring), telling ``hooks``.

    ``acquire_timeout`` bounds an acquire (plus the wait the policy gives it) and the release
    at the end; ``jitter`` spreads a candidate's waits (not a leader's); ``watcher`` hears every
    refusal's holder; ``policy``: the owner's rules (:class:`Policy`; default :class:`Eager`);
    ``on_error`` hears each failed attempt's error (a :class:`TimeoutError` when it ran out of
    time) and whether it was a renewal. :meth:`run`'s ``stop`` also cuts an attempt short.
    """

    def __init__(
        self,
        election: Election[R],
        backend: LockBackend[R],
        hooks: TermHooks[R],
        *,
        acquire_timeout: float,
        jitter: Callable[[float], float] = lambda wait: wait,
        clock: Callable[[], float] = time.monotonic,
        watcher: Watcher | None = None,
        policy: Policy | None = None,
        on_error: Callable[[BaseException, bool], None] | None = None,
    ) -> None:
        self.election = election
        self.policy: Policy = policy or Eager()
        self.on_error = on_error
        self.watcher = watcher
        self.backend = backend
        self.hooks = hooks
        self.acquire_timeout = acquire_timeout
        self.jitter = jitter
        self.clock = clock
        self.is_leader = False  # what the hooks were told
        self.holder: str | None = None  # the last holder an attempt saw (None: unknown)
        self.last_error: str | None = None  # why the last attempt failed
        self.idle: Defer | None = None  # why the last due acquire was not made
        self._ending: str | None = None  # end() asked to step down, with this reason
        self._wake = asyncio.Event()
        self._woken = False  # the last wait was ended by wake()
        self._stop = asyncio.Event()  # run()'s
        self._ended = asyncio.Event()  # end() was called: cut the attempt under way short
        self.due_by = math.inf  # monotonic: the loop comes around again before this (watchdog)

    def leading(self) -> bool:
        """True while the term runs (before its deadline)."""
        return self.election.leading(self.clock())

    async def run(self, stop: asyncio.Event) -> None:
        """Attempt, settle, wait; until ``stop`` is set. A running term is ended and the lock
        released on the way out."""
        self._stop = stop
        try:
            while not stop.is_set():
                self.due_by = self.clock() + self.acquire_timeout
                if not await self._handed_off() and not self._early():
                    await self.attempt()
                await self.settle()
                await self._pause(stop)
        finally:
            await self.resign()

    def wake(self) -> None:
        """Decide again now (the owner's rules changed): ends the current wait."""
        self._wake.set()

    def end(self, reason: str) -> None:
        """Step down (the owner's planned hand-off, a drain that ended): the running term ends
        with ``reason`` at once and the lock is given back (after :meth:`Policy.release_after`);
        the campaign goes on running; a renewal under way is cut short. Nothing happens when no
        term runs."""
        if self.is_leader:
            self._ending = reason
            self._ended.set()
            self.wake()

    async def attempt(self) -> None:
        """One acquire (or, while leading, renew), bounded; its outcome goes to the election.
        An acquire the policy declines is not made (:attr:`idle` says why)."""
        wait: float | None = None
        if not self.is_leader:
            decision = self.policy.acquire(self.clock())
            if isinstance(decision, Defer):
                self.idle = decision
                return
            wait = decision
        self.idle = None
        sent = self.clock()
        budget = self.election.budget(sent) if self.is_leader else self.acquire_timeout
        if budget is None:
            return  # the deadline passed: settle() ends the term
        if wait is not None:
            budget += wait
        renewing = self.is_leader
        try:
            answer = await self._bounded(
                self.backend.renew() if renewing else self.backend.acquire(wait), budget
            )
        except Exception as exc:  # noqa: BLE001 - the backend says which errors end the term
            if isinstance(exc, TimeoutError):
                exc = TimeoutError(f"no answer within {budget:.2f}s")
            self.last_error = str(exc) or type(exc).__name__
            # retried a retry period after the failed attempt was sent (client-go's ticker: a
            # slow failure is retried at once)
            self.election.failed(sent, self.backend.loss(exc))
            if self.on_error is not None:
                self.on_error(exc, renewing)
            return
        if answer is None:
            return  # stopped or ended meanwhile: the loop ends the term
        result = answer
        self.last_error = None
        if isinstance(result, Refused):
            self.holder = result.holder
            self.election.failed(sent if result.waited else self.clock(), None)
            if self.watcher is not None:
                await self.watcher.held(result.holder)
            return
        if self.election.succeeded(result.sent_at, self.clock(), result.deadline, result.record):
            self.holder = None
            if not self.is_leader:
                self.is_leader = True
                await self.hooks.started(result)

    async def _bounded(
        self, call: Awaitable[Granted[R] | Refused], budget: float
    ) -> Granted[R] | Refused | None:
        """``call``'s answer within ``budget`` seconds (else TimeoutError), or None when the
        campaign is stopped or :meth:`end` is called first (a pending attempt must not hold up
        a hand-off)."""
        self.due_by = self.clock() + budget + 1.0
        task = asyncio.ensure_future(call)
        stoppers = {
            asyncio.ensure_future(self._stop.wait()),
            asyncio.ensure_future(self._ended.wait()),
        }
        try:
            done, _ = await asyncio.wait(
                {task, *stoppers}, timeout=budget, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for stopper in stoppers:
                stopper.cancel()
            if not task.done():
                task.cancel()
                task.add_done_callback(_retrieve)
        if task in done:
            return task.result()
        # never wait long for the cancelled call: a cancelled Redis command can take its time
        # to tear its connection down, and stopping must stay prompt
        await asyncio.wait({task}, timeout=1.0)
        if self._stop.is_set() or self._ended.is_set():
            return None
        raise TimeoutError

    async def settle(self) -> None:
        """Tell the hooks when the term ended (deadline passed, refused)."""
        step = self.election.next(self.clock())
        if step.action is Action.LOST:
            if self.is_leader:
                await self._stopped(step.reason)
            else:
                self.election.reset()

    async def resign(self, reason: str = SHUTDOWN) -> None:
        """End a running term (``reason``) and give the lock back, bounded (not before
        :meth:`Policy.release_after`)."""
        self._ending = None
        self._ended.clear()
        if not self.is_leader:
            return
        await self._stopped(reason)
        if not await self._hold():
            self.hooks.released(False)  # left to expire: its deadline came first
            return
        try:
            async with asyncio.timeout(self.acquire_timeout):
                outcome: bool | Exception = await self.backend.release()
        except Exception as exc:  # noqa: BLE001 - reported; the lock runs out by itself
            outcome = exc
        self.hooks.released(outcome)

    async def _handed_off(self) -> bool:
        """Step down when :meth:`end` asked it or the policy hands off; True if it did."""
        if not self.is_leader:
            return False
        reason = self._ending or self.policy.hand_off(self.clock())
        if reason is None:
            return False
        await self.resign(reason)
        return True

    async def _hold(self) -> bool:
        """Keep the lock of the term that just ended, unrenewed, until the policy lets it go;
        False if its own deadline comes first (then it is left to expire)."""
        deadline = self.election.lease_deadline  # the last grant's
        while True:
            after = self.policy.release_after()
            now = self.clock()
            if after is None or now >= after:
                return True
            if now >= deadline:
                return False
            nap = min(after, deadline, now + self.election.retry_every) - now
            self.due_by = now + nap + self.acquire_timeout
            await asyncio.sleep(nap)

    async def _stopped(self, reason: str) -> None:
        self.election.reset()
        self.is_leader = False
        await self.hooks.stopped(reason)

    async def _pause(self, stop: asyncio.Event) -> None:
        now = self.clock()
        wait = max(0.0, self.election.next(now).at - now)
        if self.idle is not None:
            wait = self.idle.seconds
        if not self.is_leader:
            wait = self.jitter(wait)
        self.due_by = now + wait + self.acquire_timeout
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await _first(stop, self._wake)
        self._woken = self._wake.is_set()
        self._wake.clear()

    def _early(self) -> bool:
        """Woken before the next attempt is due (the policy is asked again, no attempt)."""
        now = self.clock()
        return self._woken and self.idle is None and now < self.election.next(now).at


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned call's outcome as seen (it was reported as a timeout or a stop), so
    asyncio does not log "Task exception was never retrieved" for it."""
    if not task.cancelled():
        task.exception()


async def _first(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
