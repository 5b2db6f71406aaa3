"""The asyncio driver of :class:`~redlease.sidecar.election.Election`: does its I/O.

One :class:`Elector` runs the candidate loop (acquire / renew / step down) and, beside it, the
observer loop (candidate heartbeat and a STATUS read every retry period). It owns the Redis
client. With a drain timeout, a planned step-down (:meth:`Elector.stop` while leading, the
hand-off to the preferred holder) first drains: the election publishes ``leader: false, draining:
true`` and keeps renewing until :meth:`Elector.drained` or the drain's end, then the lease is
released. What it learns goes to :class:`Hooks` (publish state, metrics, logs); the sidecar and
`redlease run` are two different sets of hooks on the same elector.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import structlog

from redlease.core import _async, aio
from redlease.core.connect import connect_target
from redlease.core.durability import read_config, restart_loss
from redlease.core.keys import LockKeys
from redlease.core.observe import Notices, node_drivers, read_view
from redlease.core.rules import OPERATOR
from redlease.core.state import heartbeat_flow
from redlease.core.view import LockView
from redlease.errors import LockError, LockTimeout, RedleaseError
from redlease.sidecar.config import ElectionConfig
from redlease.sidecar.election import Acquire, Election, Idle, Renew, StepDown, Term, Transition

T = TypeVar("T")
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

    def refused(self) -> None:
        """An acquisition found the lock held by someone else (contention, not an outage)."""

    def claim_until(self) -> float | None:
        """Unix time up to which a claim of this process's leadership that it published (and
        could not withdraw) may still be trusted; ``None``: none. A step-down does not release
        the lease before it."""
        return None


class _Stopped(Exception):
    """The elector was asked to stop while waiting."""


class Elector:
    """Runs the election for one lock until :meth:`stop`; releases and withdraws on the way out."""

    def __init__(
        self, config: ElectionConfig, hooks: Hooks | None = None, drain_timeout: float = 0.0
    ) -> None:
        self.election = Election(config)
        self.drain_timeout = drain_timeout  # seconds; 0: a planned step-down releases at once
        self._stop_after_drain = False
        self.hooks = hooks or Hooks()
        self._client: Any = None
        self._lock: aio.MultiLock | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._pending: ElectionConfig | None = None
        self._tick_deadline = time.monotonic() + 30.0
        self._task: asyncio.Task[None] | None = None
        self._outage_logged = False
        self._durability_checked = False
        self._notices = Notices()

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
            self._emit(transition)

    def healthy(self) -> bool:
        """The loop runs and has not stalled past the time its current step may take."""
        if self._task is None or self._task.done():
            return False
        return time.monotonic() <= self._tick_deadline

    def reconfigure(self, config: ElectionConfig) -> None:
        """Adopt new settings; a new lock name or node set makes the elector step down first."""
        if config == self.config:
            return
        self._pending = config
        self._wake.set()

    def stop(self) -> None:
        """Stop: release and withdraw. While leading with a drain timeout, drain first (or join
        the drain under way); a second call stops at once."""
        if not self._stop_after_drain and (
            self.election.drain is not None or self._drain("shutting down")
        ):
            self._stop_after_drain = True
            return
        self._stop.set()
        self._wake.set()

    def drained(self) -> bool:
        """The app finished its work: end the drain now (the lease is released at once).
        False when not draining."""
        if not self.election.app_drained(time.monotonic()):
            return False
        log.info("app drained: releasing", lock=self.config.lock)
        self._wake.set()
        return True

    async def run(self) -> None:
        """The candidate loop; returns after :meth:`stop` (lease released, candidate withdrawn)."""
        self._task = asyncio.current_task()
        self._client = self._connect()
        observer = asyncio.create_task(self._observe_loop(), name="redlease-observe")
        try:
            while not self._stop.is_set():
                try:
                    await self._step()
                except _Stopped:
                    break
                except Exception as exc:  # noqa: BLE001 - the loop must survive surprises
                    log.exception("election step failed", lock=self.config.lock, error=str(exc))
                    self.hooks.error(type(exc).__name__)
                    await self._sleep(self.election.failed_attempt(time.monotonic()))
        finally:
            observer.cancel()
            await asyncio.wait({observer}, timeout=1.0)
            await self._shutdown()

    # -- the loop -----------------------------------------------------------------------------

    async def _step(self) -> None:
        if self._pending is not None:
            await self._apply_pending()
        self.refresh()
        self.hooks.changed()
        if self._stop_after_drain and self.election.term is None:
            raise _Stopped  # drained and released (or the term ended meanwhile)
        action = self.election.next_action(time.monotonic())
        if isinstance(action, Acquire):
            await self._acquire(action)
        elif isinstance(action, Renew):
            await self._renew(action)
        elif isinstance(action, StepDown):
            await self._step_down(action.reason, drain=True)
        elif isinstance(action, Idle):
            await self._sleep(action.wait)

    async def _acquire(self, action: Acquire) -> None:
        cfg = self.config
        # every key of the lock as one lease (one key: exactly a Lock); leader only while all
        # of them are held
        lock = aio.MultiLock(
            self._client,
            cfg.redis_keys,
            ttl=cfg.timing.ttl,
            identity=cfg.identity,
            replicas=cfg.replicas,
            replica_timeout=cfg.replica_timeout,
        )
        timeout = self.hooks.acquire_timeout(action.timeout)
        if timeout is None:
            await self._sleep(action.timeout)
            return
        budget = timeout + self._socket_timeout() + 1.0
        try:
            lease = await self._bounded(lock.acquire(timeout=timeout), budget)
        except LockTimeout:
            self.hooks.refused()
            return
        except (LockError, TimeoutError) as exc:
            self._outage(exc)
            return
        self._lock = lock
        self._recovered()
        transition = self.election.acquired(
            fencing_token=lease.fencing_token,
            server_ms=lease.acquired_at_ms,
            transitions=lease.transitions,
            sent_at=lease.sent_at,
            lease_deadline=lease.deadline,
            received_at=time.monotonic(),
        )
        if transition is None:
            log.warning("grant came after its deadline: giving it back", lock=cfg.lock)
            await self._drop_lease()
            return
        self._emit(transition)

    async def _renew(self, action: Renew) -> None:
        if action.wait > 0:
            await self._sleep(action.wait)
            return
        term = self.election.term
        lock = self._lock
        if term is None or lock is None or action.budget <= 0:
            return
        now = time.monotonic()
        self.election.renew_started(term, now)
        try:
            lease = await self._bounded(lock.extend(), action.budget)
        except (LockError, TimeoutError) as exc:
            self.hooks.error(type(exc).__name__)
            transition = self.election.renew_failed(term, exc)
            if transition is not None:
                self._emit(transition)
                await self._drop_lease(term)
            else:
                self._outage(exc, count=False)
            return
        self.hooks.renewed(time.monotonic() - now)
        self._recovered()
        self.election.renewed(
            term,
            sent_at=lease.sent_at,
            server_ms=lease.renewed_ms,
            lease_deadline=lease.deadline,
            received_at=time.monotonic(),
        )

    async def _step_down(self, reason: str, *, drain: bool = False) -> None:
        """Stop leading and release; ``drain``: a planned step-down, which drains first if a
        drain timeout is set (this returns at once; the election steps down again after)."""
        if drain and self._drain(reason):
            return
        term = self.election.term
        transition = self.election.stepped_down(reason)
        if transition is not None:
            self._emit(transition)  # publishes leader: false
        if term is None:
            return
        if await self._outwait_claim(term):
            await self._drop_lease(term)
        else:
            self._lock = None

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
        self._wake.set()
        self.hooks.changed()
        return True

    async def _outwait_claim(self, term: Term) -> bool:
        """Keep the lease of the term that just ended, unrenewed, while a published claim of it
        may still be trusted (the step-down could not be published), retrying the publication.
        Not cut short by :meth:`stop`. Returns whether the lease may be released now: not if
        its local deadline came first (a stepped wall clock); then it is left to expire."""
        until = self.hooks.claim_until()
        if until is None or time.time() >= until:
            return True
        log.error(
            "step-down not published: holding the lease until the published claim runs out",
            lock=self.config.lock,
            leader_until=round(until, 3),
            hold=round(until - time.time(), 3),
        )
        while True:
            left = min(until - time.time(), term.lease_deadline - time.monotonic())
            if left <= 0:
                break
            step = min(left, self.config.timing.retry_period)
            self._expect(step)
            await asyncio.sleep(step)
            self.hooks.changed()  # once leader: false is out, release at once
            claim = self.hooks.claim_until()
            if claim is None:
                break
            until = claim
        if self.hooks.claim_until() is None:
            log.info("step-down published, releasing", lock=self.config.lock)
        elif time.time() < until:
            log.warning(
                "lease deadline came before the published claim's end: left to expire",
                lock=self.config.lock,
            )
            return False
        else:
            log.info("published claim ran out, releasing", lock=self.config.lock)
        return True

    async def _drop_lease(self, term: Term | None = None) -> None:
        """Release the lease if Redis still has it (speeds up the take-over); best effort."""
        lock, self._lock = self._lock, None
        if lock is None or lock.lease() is None:
            return
        try:
            async with asyncio.timeout(max(0.2, min(2.0, self.config.timing.retry_period))):
                await lock.release()
        except (LockError, TimeoutError) as exc:
            log.debug("release after step-down failed", lock=self.config.lock, error=str(exc))

    async def _apply_pending(self) -> None:
        new, self._pending = self._pending, None
        if new is None:
            return
        old = self.config
        if (new.redis_lock, new.target) != (old.redis_lock, old.target):
            await self._step_down("configuration changed: lock or nodes")
            await self._withdraw()
            await self._close_client()
            self.election = Election(new)
            self._client = self._connect()
        else:
            if (new.replicas, new.replica_timeout) != (old.replicas, old.replica_timeout):
                # the held lease's handle WAITs as it was told: take a new term under the new rule
                await self._step_down("configuration changed: replicas")
            self.election.update(new)
        log.info(
            "configuration applied",
            lock=new.lock,
            redis_lock=new.redis_lock,
            identity=new.identity,
            ttl=new.timing.ttl,
            paused=new.paused,
            preferred_holder=new.preferred_holder,
            replicas=new.replicas,
        )

    # -- observer loop ------------------------------------------------------------------------

    async def _observe_loop(self) -> None:
        """Every retry period: heartbeat and read every node, build the lock view, hand it to
        the election. This is the only writer of node health (the view's ``nodes.healthy``)."""
        while True:
            cfg = self.config
            started = time.monotonic()
            hb_ms = int(max(cfg.timing.ttl, 3 * cfg.timing.retry_period) * 1000)
            heartbeat = LockKeys.for_name(cfg.redis_lock)
            view = await read_view(
                self._client,
                cfg.redis_keys,
                cfg.target.quorum,
                max(1.0, cfg.timing.retry_period),
                functools.partial(heartbeat_flow, heartbeat, cfg.identity, hb_ms),
            )
            if self.config is cfg:
                if not self._durability_checked and view.healthy_nodes:
                    self._durability_checked = True
                    await self._warn_if_not_durable(view)
                self._note_outside(view)
                transition = self.election.observe(view, started)
                if transition is not None:
                    self._emit(transition)
            self.refresh()
            self.hooks.changed()
            await asyncio.sleep(cfg.timing.retry_period)

    async def _warn_if_not_durable(self, view: LockView) -> None:
        """Once, on a single node (a RedLock set has the restart rule): say what a restart of
        it would lose."""
        if view.nodes.total != 1 or getattr(self._client, "clients", None):
            return
        loss = restart_loss(await read_config(self._client, 1.0))
        if loss is not None:
            log.warning(
                "the Redis node does not keep leases across a restart",
                lock=self.config.lock,
                node=view.healthy_nodes[0],
                persistence=loss,
                effect="after a restart a second holder can be granted while this one still "
                "leads until its next renewal; fencing tokens still only grow",
                remedy="appendonly yes + appendfsync always, or a RedLock set of 3+ nodes",
            )
        log.debug("persistence checked", lock=self.config.lock, loses=loss)  # after the warning

    # -- helpers ------------------------------------------------------------------------------

    def _emit(self, transition: Transition) -> None:
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
        else:
            log.warning(
                "stopped leading" if transition.kind == "lost" else "stepped down", **fields
            )
        self.hooks.transition(transition)
        self.hooks.changed()

    def _note_outside(self, view: LockView) -> None:
        """Log nodes that answer but do not count: what the operator must do, rate-limited."""
        due, back = self._notices.due(view, time.monotonic())
        for node in back:
            log.info("redis node counts again", lock=view.lock, node=node)
        for node, out in due:
            if out.kind == OPERATOR:
                log.warning(
                    "redis node needs an operator", lock=view.lock, node=node, why=out.why,
                    action=out.action,
                )  # fmt: skip
            else:
                log.info("redis node does not count yet", lock=view.lock, node=node, why=out.why)

    def _outage(self, exc: BaseException, *, count: bool = True) -> None:
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

    def _expect(self, seconds: float) -> None:
        slack = max(2.0, 2 * self.config.timing.retry_period)
        self._tick_deadline = time.monotonic() + seconds + slack

    async def _sleep(self, seconds: float) -> None:
        self._expect(seconds)
        if seconds <= 0:
            return
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        if self._stop.is_set():
            raise _Stopped

    async def _bounded(self, coro: Awaitable[T], budget: float) -> T:
        """Await ``coro`` for at most ``budget`` seconds; give up at once when stopping."""
        self._expect(budget)
        task = asyncio.ensure_future(coro)
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            done, _ = await asyncio.wait(
                {task, stopper}, timeout=budget, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopper.cancel()
        if task in done:
            return task.result()
        task.cancel()
        task.add_done_callback(_retrieve)  # it may end later, with an error nobody awaits
        # never wait long for the cancelled operation: a cancelled redis-py command can take
        # its time to tear its connection down, and stopping must stay prompt
        await asyncio.wait({task}, timeout=1.0)
        if task.done() and not task.cancelled():
            with contextlib.suppress(RedleaseError, TimeoutError):
                task.result()
        if self._stop.is_set():
            raise _Stopped
        raise TimeoutError(f"no answer within {budget:.3f}s")

    def _socket_timeout(self) -> float:
        return max(0.5, min(5.0, self.config.timing.ttl / 3))

    def _connect(self) -> Any:
        return connect_target(
            self.config.target, asyncio=True, socket_timeout=self._socket_timeout()
        )

    async def _withdraw(self) -> None:
        cfg = self.config
        keys = LockKeys.for_name(cfg.redis_lock)
        for _, node in node_drivers(self._client, cfg.redis_lock):
            try:
                async with asyncio.timeout(0.5):
                    await _async.drive(node, heartbeat_flow(keys, cfg.identity, 0))
            except (LockError, TimeoutError) as exc:
                log.debug("candidate withdrawal failed", lock=cfg.lock, error=str(exc))

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await client.aclose()

    async def _shutdown(self) -> None:
        """Stop leading, release at once (standbys take over), withdraw, close."""
        await self._step_down("shutting down")
        await self._withdraw()
        await self._close_client()
        self.hooks.changed()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark the outcome of an abandoned operation as seen (its error was already reported as a
    timeout), so asyncio does not log "Task exception was never retrieved" for it."""
    if not task.cancelled():
        task.exception()


def jitter(seconds: float) -> float:
    """``seconds`` ± 10 %, so that candidates do not retry in lock-step."""
    return seconds * random.uniform(0.9, 1.1)
