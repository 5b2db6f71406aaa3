"""The sidecar's elector: the one campaign loop (:class:`~redlease.election.campaign.Campaign` over
a :class:`~redlease.election.campaign.RedisLease`) with the sidecar's rules, and the observer loop.

The campaign acquires, renews and ends terms by the elector state machine every surface shares;
this module gives it the sidecar's rules as its :class:`~redlease.election.campaign.Policy` (from
:class:`~redlease.sidecar.election.Candidate`: back-off after an outage, pause, deferring to and
handing off to the preferred holder, the drain, the hold of a lease whose step-down could not be
published) and turns its hooks into transitions. Beside it, the observer loop heartbeats and
reads the lock view every retry period. With a drain timeout, a planned step-down
(:meth:`SidecarElector.stop` while leading, the hand-off to the preferred holder) first
drains: the election publishes ``leader: false, draining: true`` and the campaign keeps
renewing until :meth:`SidecarElector.drained` or the drain's end, then the lease is released.
What it learns goes to :class:`Hooks` (publish state, metrics, logs); the sidecar and `redlease
run` are two different sets of hooks on the same elector.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

import structlog

from redlease.core import aio
from redlease.core.connect import connect_target
from redlease.core.lease import Lease
from redlease.core.term import classify
from redlease.core.timing import (
    release_timeout,
    socket_timeout,
    spread,
    stall_slack,
)
from redlease.election.campaign import SHUTDOWN, Campaign, Defer, Granted, Refused
from redlease.election.redislease import RedisLease
from redlease.errors import LockError
from redlease.sidecar.config import ElectionConfig
from redlease.sidecar.election import Candidate, Transition
from redlease.sidecar.observer import LockObserver, withdraw

log = structlog.get_logger("redlease.sidecar")


class Hooks:
    """What an elector tells its owner; every method is optional (no-op here)."""

    def transition(self, transition: Transition) -> None:
        """Who leads changed (called before the lease is released, after it is acquired)."""

    def changed(self) -> None:
        """Something in the status document may have changed: publish it."""

    def renewed(self, latency: float) -> None:
        """A renewal succeeded after ``latency`` seconds."""

    def error(self, kind: str) -> None:
        """An operation failed; ``kind`` is the exception type name."""

    def acquire_timeout(self, planned: float) -> float | None:
        """How long the next acquisition may wait for a release (``planned``: the election's
        choice); ``None``: make no attempt now (`redlease run` while stopping its command)."""
        return planned

    def refused(self, holder: str | None = None) -> None:
        """An acquisition found the lock held by someone else (contention, not an outage);
        ``holder``: who, when the backend could say."""

    def check_durability(self) -> bool:
        """Whether to check once, on a single node, that it keeps leases across a restart (and
        warn if not). `redlease run` says no: a job's one term is no place for a warning about
        the sidecar's long life, and the check must not still be in flight when it exits."""
        return True

    def claim_until(self) -> float | None:
        """Unix time up to which a claim of this process's leadership that it published (and
        could not withdraw) may still be trusted; ``None``: none. A step-down does not release
        the lease before it."""
        return None


class _Lease(RedisLease):
    """The sidecar's lease: every key of the lock as one lease (one key: exactly a Lock; leader
    only while all of them are held), or with ``holders`` > 1 one slot of the lock's counting
    semaphore (:class:`redlease.core.aio.Semaphore`; one key only), made afresh for each term
    from the settings of the time; a renewal's outcome and latency go to the elector."""

    def __init__(self, elector: SidecarElector) -> None:
        super().__init__(self._lock(elector))
        self.elector = elector
        self.unclaimed = False  # the last grant did not start a term (void on arrival)

    @staticmethod
    def _lock(elector: SidecarElector) -> aio.MultiLock | aio.Semaphore:
        cfg = elector.config
        if cfg.holders > 1:  # N active of M: one slot of the lock's counting semaphore
            return aio.Semaphore(
                elector.client,
                cfg.redis_lock,
                limit=cfg.holders,
                ttl=cfg.timing.ttl,
                identity=cfg.identity,
                replicas=cfg.replicas,
                replica_timeout=cfg.replica_timeout,
            )
        return aio.MultiLock(
            elector.client,
            cfg.redis_keys,
            ttl=cfg.timing.ttl,
            identity=cfg.identity,
            replicas=cfg.replicas,
            replica_timeout=cfg.replica_timeout,
        )

    async def acquire(self, wait: float | None = None) -> Granted[Lease] | Refused:
        if self.unclaimed and self.lock.lease() is not None:
            log.warning("grant came after its deadline: giving it back", lock=self.lock.name)
            with contextlib.suppress(LockError, TimeoutError):
                async with asyncio.timeout(self.elector.release_timeout()):
                    await self.release()
        self.lock = self._lock(self.elector)  # an asyncio acquire never outlives its attempt
        granted = await super().acquire(wait)
        self.unclaimed = isinstance(granted, Granted)  # until the campaign starts a term on it
        return granted

    async def renew(self) -> Granted[Lease] | Refused:
        started = time.monotonic()
        granted = await super().renew()
        if isinstance(granted, Granted):
            self.elector.renewed(started)
        return granted


class SidecarElector:
    """Runs the election for one lock until :meth:`stop`; releases and withdraws on the way out."""

    def __init__(
        self, config: ElectionConfig, hooks: Hooks | None = None, drain_timeout: float = 0.0
    ) -> None:
        self.election = Candidate(config)
        self.drain_timeout = drain_timeout  # seconds; 0: a planned step-down releases at once
        self._stop_after_drain = False
        self.hooks = hooks or Hooks()
        self.client: Any = None
        self.campaign: Campaign[Lease] | None = None
        self.lease: _Lease | None = None  # the campaign's (each run makes its own)
        self._stop = asyncio.Event()  # stop() was called (after any drain)
        self._halt = asyncio.Event()  # the running campaign ends (stop, or a new lock or nodes)
        self._end_reason = "shutting down"  # the step-down reason when the campaign ends
        self._planned: set[str] = set()  # step-downs this elector asked for (not losses)
        self.last_outage = ""  # what the latest failed Redis operation said
        self._pending: ElectionConfig | None = None  # a new lock or node set, for the next run
        self._drain_wake: asyncio.TimerHandle | None = None
        self._holding = False  # a term's lease is kept until its published claim runs out
        self._task: asyncio.Task[None] | None = None
        self._born = time.monotonic()
        self._outage_logged = False
        self.observer = LockObserver(self)  # reads the lock view beside the campaign

    # -- public -------------------------------------------------------------------------------

    @property
    def config(self) -> ElectionConfig:
        return self.election.config

    def leading(self) -> bool:
        """Leader right now (checks the renew deadline first)."""
        self.refresh()
        return self.election.leading(time.monotonic())

    def refresh(self) -> None:
        """Apply the renew deadline now: anything reporting state calls this first."""
        transition = self.election.check(time.monotonic())
        if transition is not None:
            self.emit(transition)
            self._wake()

    def healthy(self) -> bool:
        """The loop runs and has not stalled past the time its current step may take."""
        return time.monotonic() <= self.healthy_until()

    def healthy_until(self) -> float:
        """The monotonic instant after which the loop counts as stalled (its current step is
        overdue by more than the slack); ``-inf`` when it does not run."""
        if self._task is None or self._task.done():
            return -math.inf
        due = self._born + 30.0 if self.campaign is None else self.campaign.due_by
        return due + stall_slack(self.config.timing)

    def reconfigure(self, config: ElectionConfig) -> None:
        """Adopt new settings; a new lock name or node set makes the elector step down first."""
        old = self._pending or self.config
        if config == old:
            return
        moved = (config.redis_lock, config.target) != (old.redis_lock, old.target)
        if moved or self._pending is not None:
            self._pending = config  # all of it applies with the new lock or node set
            self._end_reason = "configuration changed: lock or nodes"
            self._halt.set()
            return
        if (config.replicas, config.replica_timeout) != (old.replicas, old.replica_timeout):
            # the held lease's handle WAITs as it was told: take a new term under the new rule
            self._end("configuration changed: replicas")
        if config.holders != old.holders:
            # a lock and a semaphore slot are different leases: a new term on the new one
            self._end("configuration changed: holders")
        self.election.update(config)
        self._applied(config)
        self._wake()

    def stop(self, drain: bool = True) -> None:
        """Stop: release and withdraw. While leading with a drain timeout, drain first (or join
        the drain under way); a second call stops at once, and so does ``drain`` False (the
        app has exited already: nobody is left to drain)."""
        if (
            drain
            and not self._stop_after_drain
            and (self.election.drain is not None or self._drain("shutting down"))
        ):
            self._stop_after_drain = True
            return
        self._end_reason = "shutting down"
        self._stop.set()
        self._halt.set()

    def drained(self) -> bool:
        """The app finished its work: end the drain now (the lease is released at once).
        False when not draining."""
        if not self.election.app_drained(time.monotonic()):
            return False
        log.info("app drained: releasing", lock=self.config.lock)
        self._drain_due()
        return True

    async def run(self) -> None:
        """The campaign; returns after :meth:`stop` (lease released, candidate withdrawn)."""
        self._task = asyncio.current_task()
        self.client = self._connect()
        self.observer.running = True
        observer = asyncio.create_task(self.observer.run(), name="redlease-observe")
        try:
            while not self._stop.is_set():
                if self._pending is not None:
                    await self._restart()
                self._halt.clear()
                if not self._stop.is_set():
                    await self._campaign()
        finally:
            # the loop also ends by itself: a cancellation that redis-py or wait_for swallowed
            # (it happens at a read's edge) would otherwise keep it reading until the timeout
            self.observer.stop()
            observer.cancel()
            await asyncio.wait({observer}, timeout=1.0)
            await withdraw(self.client, self.config)
            await self._close_client()
            self.hooks.changed()

    # -- the campaign -------------------------------------------------------------------------

    async def _campaign(self) -> None:
        """Run one campaign until :meth:`stop` or a new lock or node set; an unexpected error
        is logged and the campaign runs again after a back-off."""
        self.lease = _Lease(self)
        self.campaign = Campaign(
            self.election.timer,
            self.lease,
            self,
            acquire_timeout=self._socket_timeout() + 1.0,
            jitter=spread,
            watcher=self,
            policy=self,
            on_error=self._failed,
        )
        try:
            await self.campaign.run(self._halt)
        except Exception as exc:  # noqa: BLE001 - the loop must survive surprises
            log.exception("election step failed", lock=self.config.lock, error=str(exc))
            self.hooks.error(type(exc).__name__)
            delay = self.election.failed_attempt(time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._halt.wait()
        if self._drain_wake is not None:
            self._drain_wake.cancel()

    async def _restart(self) -> None:
        """A new lock or node set: withdraw from the old one, connect to the new one."""
        new, self._pending = self._pending, None
        assert new is not None
        await withdraw(self.client, self.config)
        await self._close_client()
        self.election = Candidate(new)
        self.client = self._connect()
        self._end_reason = "shutting down"
        self._applied(new)

    def _applied(self, new: ElectionConfig) -> None:
        log.info(
            "configuration applied",
            lock=new.lock,
            redis_lock=new.redis_lock,
            identity=new.identity,
            ttl=new.timing.ttl,
            paused=new.paused,
            preferred_holder=new.preferred_holder,
            replicas=new.replicas,
            holders=new.holders,
        )

    def _wake(self) -> None:
        if self.campaign is not None:
            self.campaign.wake()

    def _end(self, reason: str) -> None:
        """Step down now (planned), releasing the lease."""
        if self.campaign is not None and self.campaign.is_leader:
            self._planned.add(reason)
            self.campaign.end(reason)

    # -- the campaign's policy: the sidecar's rules (sidecar/election.py) ----------------------

    def acquire(self, now: float) -> float | Defer | None:
        self.refresh()
        self.hooks.changed()
        planned = self.election.candidate(time.monotonic())
        if isinstance(planned, Defer):
            return planned
        timeout = self.hooks.acquire_timeout(planned)
        return Defer(planned, "not now") if timeout is None else timeout

    def hand_off(self, now: float) -> str | None:
        self.refresh()
        self.hooks.changed()
        if self.election.term is None:
            return None
        mono = time.monotonic()
        reason = self.election.step_down(mono)
        if reason is not None:
            if self._drain(reason):
                return None  # a planned hand-off drains first
            self._planned.add(reason)
            return reason
        if self.election.drain is not None:  # ask again at the drain's end
            if self._drain_wake is not None:
                self._drain_wake.cancel()
            loop = asyncio.get_running_loop()
            self._drain_wake = loop.call_later(
                max(0.0, self.election.drain_end() - mono), self._drain_due
            )
        return None

    def _drain_due(self) -> None:
        """The drain may be over (the app said so, its end came): step down now, cutting a
        renewal under way short (the lease is released, never lost to a hung renewal)."""
        if self.election.drain is None:
            return
        reason = self.election.step_down(time.monotonic())
        if reason is not None:
            self._end(reason)

    def release_after(self) -> float | None:
        """Keep the lease of the term that just ended while a published claim of it may still
        be trusted (the step-down could not be published), retrying the publication."""
        self.hooks.changed()  # once leader: false is out, release at once
        until = self.hooks.claim_until()
        left = None if until is None else until - time.time()
        if left is None or left <= 0:
            if self._holding:
                self._holding = False
                why = "step-down published" if until is None else "published claim ran out"
                log.info(f"{why}, releasing", lock=self.config.lock)
            return None
        if not self._holding:
            self._holding = True
            log.error(
                "step-down not published: holding the lease until the published claim runs out",
                lock=self.config.lock,
                leader_until=round(until or 0.0, 3),
                hold=round(left, 3),
            )
        return time.monotonic() + left

    # -- the campaign's hooks -----------------------------------------------------------------

    async def started(self, granted: Granted[Lease]) -> None:
        if self.lease is not None:
            self.lease.unclaimed = False
        self._recovered()
        transition = self.election.acquired(time.monotonic())
        if transition is not None:
            self.emit(transition)
        self.observer.look()  # the view may predate the grant

    async def stopped(self, reason: str) -> None:
        if reason == SHUTDOWN:
            reason = self._end_reason
        if reason in self._planned or reason == self._end_reason:
            transition = self.election.stepped_down(reason)
        else:
            transition = self.election.ended("lost", reason)
        self._planned.discard(reason)
        if transition is not None:
            self.emit(transition)  # publishes leader: false
        if self._stop_after_drain:
            self._stop_now()

    def released(self, outcome: bool | Exception) -> None:
        if self._holding:
            self._holding = False
            log.warning(
                "lease deadline came before the published claim's end: left to expire",
                lock=self.config.lock,
            )
        elif isinstance(outcome, Exception):
            log.debug("release after step-down failed", lock=self.config.lock, error=str(outcome))

    async def held(self, holder: str | None) -> None:
        self.hooks.refused(holder)

    def renewed(self, started: float) -> None:
        """A renewal came back: its latency and Redis reachable again. Whether it was in time
        is the campaign's term machine's to decide (the term's one state)."""
        self.hooks.renewed(time.monotonic() - started)
        self._recovered()
        self.election.reachable()

    def _failed(self, exc: BaseException, renewing: bool) -> None:
        """An attempt failed: a renewal is retried until the deadline (the campaign's rule);
        an acquire backs off; a refused renewal is a loss, not an outage."""
        if renewing and classify(exc) is not None:
            self.hooks.error(type(exc).__name__)
            return
        self._outage(exc, count=not renewing)

    def _stop_now(self) -> None:
        self._stop_after_drain = False
        self.stop()

    def _drain(self, reason: str) -> bool:
        """Begin draining before the step-down ``reason`` and publish it; False if there is
        nothing to drain (drain off, not leading, already draining)."""
        if not self.election.begin_drain(time.monotonic(), self.drain_timeout, reason):
            return False
        log.info(
            "draining: leader: false published, waiting for the app (POST /drained)",
            lock=self.config.lock,
            reason=reason,
            timeout=self.drain_timeout,
        )
        self._wake()
        self.hooks.changed()
        return True

    # -- helpers ------------------------------------------------------------------------------

    def emit(self, transition: Transition) -> None:
        """Log a change of who leads and tell the hooks."""
        fields: dict[str, Any] = {
            "lock": transition.lock,
            "identity": transition.identity,
            "fencing_token": transition.fencing_token,
            "reason": transition.reason,
        }
        if transition.kind == "elected":
            log.info("became leader", **fields)
        elif transition.kind == "observed":
            log.info("leader changed", holder=transition.holder, **fields)
        elif transition.kind == "lost":
            log.warning("stopped leading", **fields)
        else:  # a step-down is always one this elector asked for (SIGTERM, hand-off, pause)
            log.info("stepped down", **fields)
        self.hooks.transition(transition)
        self.hooks.changed()
        if transition.kind == "lost":
            self._wake()  # the campaign ends the term at once

    def _outage(self, exc: BaseException, *, count: bool = True) -> None:
        self.last_outage = str(exc)
        self.hooks.error(type(exc).__name__)
        delay = self.election.failed_attempt(time.monotonic()) if count else 0.0
        if not self._outage_logged:
            self._outage_logged = True
            log.warning(
                "redis unavailable, retrying with back-off",
                lock=self.config.lock,
                error=str(exc),
                retry_in=round(delay, 3),
            )
        else:
            log.debug("redis still unavailable", lock=self.config.lock, retry_in=round(delay, 3))

    def _recovered(self) -> None:
        if self._outage_logged:
            self._outage_logged = False
            log.info("redis reachable again", lock=self.config.lock)

    def release_timeout(self) -> float:
        """How long giving a lease back may take (best effort: it expires by itself)."""
        return release_timeout(self.config.timing)

    def _socket_timeout(self) -> float:
        return socket_timeout(self.config.timing.ttl)

    def _connect(self) -> Any:
        return connect_target(
            self.config.target, asyncio=True, socket_timeout=self._socket_timeout()
        )

    async def _close_client(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await client.aclose()
