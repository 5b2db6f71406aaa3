"""The operator elects its active replica through a ``coordination.k8s.io/v1`` Lease.

client-go's leader election over the one elector state machine
(:class:`~redlease.core.election.Election`: when to renew, when leading ends); :class:`Leadership`
decides whether this replica may write the Lease (pure, clock passed in); :class:`LeaseElector`
does the I/O through the one Lease writer
(:class:`~redlease.kube.leasewriter.LeaseWriter` over :class:`~redlease.kube.client.KubeClient`,
every call bounded). A candidate reads the Lease every retry period; it takes the Lease
when nobody holds it, or when the holder has not renewed it for ``leaseDurationSeconds`` as
measured on the candidate's own monotonic clock since it last saw the record change (so clocks
need not agree). The leader renews every retry period and stops leading at its renew deadline
(renew deadline after the last renewal it *sent*), which always comes before a standby may take
over. Every write is a compare-and-swap on ``resourceVersion``. On shutdown the leader releases
the Lease, so the standby takes over at its next read.

Why not kopf's peering: it is built to pause operators of lower priority (a developer's
laptop), not to fail over between equals -- replicas of the same priority all pause -- and it
needs kopf's own CRDs and cluster-wide or per-namespace RBAC. A Lease needs one object and
``get``/``create``/``update`` on Leases in the operator's own namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from redlease.core.election import Action, Election
from redlease.core.timing import Timing
from redlease.errors import KubeError
from redlease.kube.client import KubeClient
from redlease.kube.lease import LeaseRecord, duration_seconds
from redlease.kube.leasewriter import LeaseWriter

log = logging.getLogger("redlease.operator")
LABELS = {"app.kubernetes.io/name": "redlease", "app.kubernetes.io/component": "operator"}


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    """Which Lease, who this replica is, and client-go's three timings (15 s / 10 s / 2 s)."""

    namespace: str
    name: str
    identity: str
    timing: Timing = field(default_factory=Timing)


class Leadership:
    """Whether this replica may write the Lease, from what it has seen of it (no I/O); how
    long it leads is :class:`~redlease.core.election.Election`'s."""

    def __init__(self, config: ElectionConfig) -> None:
        self.config = config
        self.observed: LeaseRecord | None = None
        self.observed_at = 0.0  # monotonic time the observed record last changed

    def observe(self, record: LeaseRecord | None, now: float) -> None:
        if record != self.observed:
            self.observed = record
            self.observed_at = now

    def claim(self, record: LeaseRecord | None, now: float, wall: float) -> LeaseRecord | None:
        """The record to write to acquire or renew, or None while another holder's lease runs
        (``record`` is the Lease as just read, None if there is none)."""
        me = self.config.identity
        duration = duration_seconds(self.config.timing.ttl)
        if record is None:
            return LeaseRecord(me, duration, wall, wall, 0)
        self.observe(record, now)
        holder = record.holder
        if holder and holder != me and now < self.observed_at + record.duration:
            return None
        if holder == me:
            return replace(record, duration=duration, renew_time=wall)
        return LeaseRecord(me, duration, wall, wall, record.transitions + 1)


Hook = Callable[[], Awaitable[None]]


class LeaseElector:
    """Runs the election until stopped; ``on_started``/``on_stopped`` are awaited inline when
    this replica starts and stops leading (start quickly: renewals wait for them)."""

    def __init__(
        self, config: ElectionConfig, client: KubeClient, on_started: Hook, on_stopped: Hook
    ) -> None:
        self.config = config
        timeout = max(1.0, config.timing.retry_period)
        self.writer = LeaseWriter(client, config.namespace, config.name, LABELS, timeout)
        self.state = Leadership(config)
        timing = config.timing
        self.election = Election(timing.retry_period, timing.retry_period, timing.renew_deadline)
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.is_leader = False  # what the hooks were told
        self.transitions = 0
        self.last_error: str | None = None

    def leading(self) -> bool:
        """True while this replica may act as the active one (before its renew deadline)."""
        return self.election.leading(time.monotonic())

    async def run(self, stop: asyncio.Event) -> None:
        timing = self.config.timing
        try:
            while not stop.is_set():
                await self._round()
                step = self.election.next(time.monotonic())
                if self.is_leader and step.action is Action.LOST:
                    log.warning(
                        "operator lease %s/%s lost: no renewal within %gs (%s)",
                        self.config.namespace,
                        self.config.name,
                        timing.renew_deadline,
                        self.last_error or "no answer",
                    )
                    await self._stopped()
                wait = timing.retry_period * (1.0 if self.is_leader else random.uniform(0.9, 1.1))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await stop.wait()
        finally:
            if self.is_leader:
                await self._stopped()
                await self._release()

    async def _round(self) -> None:
        """One try to acquire or renew, bounded by the renew deadline while leading."""
        budget = self.config.timing.retry_period * 2
        if self.is_leader:
            budget = max(0.05, self.election.budget(time.monotonic()) or 0.0)
        try:
            async with asyncio.timeout(budget):
                await self._try()
        except TimeoutError:
            self.last_error = f"no answer within {budget:.2f}s"
        except KubeError as exc:
            self.last_error = str(exc)
            log.debug("operator lease: %s", exc)
        else:
            self.last_error = None

    async def _try(self) -> None:
        lease = await self.writer.read()
        now, wall = time.monotonic(), time.time()
        record = None if lease is None else LeaseRecord.of(lease)
        claim = self.state.claim(record, now, wall)
        if claim is None:
            return
        await self.writer.write(lease, claim)
        self.state.observe(claim, now)
        if not self.election.succeeded(now, time.monotonic()):
            return
        if not self.is_leader:
            self.transitions += 1
            log.info(
                "operator lease %s/%s acquired by %s (transition %d)",
                self.config.namespace,
                self.config.name,
                self.config.identity,
                claim.transitions,
            )
            self.is_leader = True
            await self.on_started()

    async def _stopped(self) -> None:
        self.election.reset()
        self.is_leader = False
        await self.on_stopped()

    async def _release(self) -> None:
        """Give the Lease up so that a standby takes over at its next read (best effort)."""
        try:
            async with asyncio.timeout(max(1.0, self.config.timing.retry_period)):
                if await self.writer.release(self.config.identity, time.time()):
                    log.info("operator lease %s released", self.writer)
        except (TimeoutError, KubeError) as exc:
            log.warning("operator lease not released (it expires by itself): %s", exc)
