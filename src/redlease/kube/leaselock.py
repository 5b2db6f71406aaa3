"""A ``coordination.k8s.io/v1`` Lease as an elector's lock (client-go's ``LeaseLock``).

:class:`Leadership` is the pure rule of who may write the Lease (clock passed in): a candidate
takes it when nobody holds it, or when the holder has not renewed it for
``leaseDurationSeconds`` as measured on the candidate's own monotonic clock since it last saw
the record change (so clocks need not agree); the holder renews its own. :class:`LeaseLock`
is the :class:`~redlease.election.campaign.LockBackend` over the one Lease writer
(:class:`~redlease.kube.leasewriter.LeaseWriter`): read, decide, compare-and-swap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from redlease.core.timing import Timing
from redlease.election.campaign import Granted, Refused
from redlease.kube.lease import LeaseRecord, duration_seconds
from redlease.kube.leasewriter import LeaseWriter


@dataclass(frozen=True, slots=True)
class LeaseElectionConfig:
    """Which Lease, who this replica is, and client-go's three timings (15 s / 10 s / 2 s)."""

    namespace: str
    name: str
    identity: str
    timing: Timing = field(default_factory=Timing)


class Leadership:
    """Whether this candidate may write the Lease, from what it has seen of it (no I/O); how
    long it leads is :class:`~redlease.core.term.Election`'s."""

    def __init__(self, config: LeaseElectionConfig) -> None:
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


class LeaseLock:
    """The Lease ``writer`` names, as a lock backend: every attempt reads the Lease, decides
    (:class:`Leadership`) and writes with compare-and-swap (a conflict is an error: retried)."""

    def __init__(
        self,
        writer: LeaseWriter,
        config: LeaseElectionConfig,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.writer = writer
        self.state = Leadership(config)
        self.clock = clock
        self.wall = wall

    async def acquire(self, wait: float | None = None) -> Granted[LeaseRecord] | Refused:
        """Acquire or renew (one rule, as client-go's ``tryAcquireOrRenew``); the write's send
        time starts the term. A Lease cannot wait for a release: ``wait`` is ignored."""
        lease = await self.writer.read()
        now = self.clock()
        record = None if lease is None else LeaseRecord.of(lease)
        claim = self.state.claim(record, now, self.wall())
        if claim is None:
            return Refused(record.holder if record is not None else None)
        await self.writer.write(lease, claim)
        self.state.observe(claim, now)
        return Granted(now, claim)

    async def renew(self) -> Granted[LeaseRecord] | Refused:
        return await self.acquire()

    async def release(self) -> bool:
        return await self.writer.release(self.state.config.identity, self.wall())

    def loss(self, exc: BaseException) -> str | None:
        """None: an API error or a lost compare-and-swap says nothing of who holds the Lease;
        the term runs until its renew deadline."""
        return None
