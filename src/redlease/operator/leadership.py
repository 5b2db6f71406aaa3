"""The operator elects its active replica through a ``coordination.k8s.io/v1`` Lease.

client-go's leader election: the one campaign loop (:class:`~redlease.election.campaign.Campaign`
over the elector state machine, :class:`~redlease.core.term.Election`: when to renew, when
leading ends) run against the Lease (:class:`~redlease.kube.leaselock.LeaseLock`: who may take
it, written with compare-and-swap through the one Lease writer, every call bounded). A
candidate tries every retry period; the leader renews every retry period and stops leading at
its renew deadline (renew deadline after the last renewal it *sent*), which always comes
before a standby may take over. On shutdown the leader releases the Lease, so the standby
takes over at its next read. :class:`LeaseElector` adds the operator's hooks and log lines.

Why not kopf's peering: it is built to pause operators of lower priority (a developer's
laptop), not to fail over between equals -- replicas of the same priority all pause -- and it
needs kopf's own CRDs and cluster-wide or per-namespace RBAC. A Lease needs one object and
``get``/``create``/``update`` on Leases in the operator's own namespace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redlease.core.term import Election
from redlease.core.timing import acquire_timeout, call_timeout, elector_periods, spread
from redlease.election.campaign import SHUTDOWN, Campaign, Granted
from redlease.kube.client import KubeClient
from redlease.kube.lease import LeaseRecord
from redlease.kube.leaselock import LeaseElectionConfig, LeaseLock
from redlease.kube.leasewriter import LeaseWriter

__all__ = ["LABELS", "LeaseElector"]

log = logging.getLogger("redlease.operator")
LABELS = {"app.kubernetes.io/name": "redlease", "app.kubernetes.io/component": "operator"}

Hook = Callable[[], Awaitable[None]]


class LeaseElector:
    """Runs the election until stopped; ``on_started``/``on_stopped`` are awaited inline when
    this replica starts and stops leading (start quickly: renewals wait for them)."""

    def __init__(
        self, config: LeaseElectionConfig, client: KubeClient, on_started: Hook, on_stopped: Hook
    ) -> None:
        self.config = config
        timing = config.timing
        timeout = call_timeout(timing)
        self.writer = LeaseWriter(client, config.namespace, config.name, LABELS, timeout)
        self.campaign = Campaign(
            Election(*elector_periods(timing)),
            LeaseLock(self.writer, config),
            self,
            acquire_timeout=acquire_timeout(timing),
            jitter=spread,
        )
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.transitions = 0

    @property
    def is_leader(self) -> bool:
        """What the hooks were told."""
        return self.campaign.is_leader

    def leading(self) -> bool:
        """True while this replica may act as the active one (before its renew deadline)."""
        return self.campaign.leading()

    async def run(self, stop: asyncio.Event) -> None:
        await self.campaign.run(stop)

    # -- the campaign's hooks -----------------------------------------------------------------

    async def started(self, granted: Granted[LeaseRecord]) -> None:
        self.transitions += 1
        log.info(
            "operator lease %s/%s acquired by %s (transition %d)",
            self.config.namespace,
            self.config.name,
            self.config.identity,
            granted.record.transitions,
        )
        await self.on_started()

    async def stopped(self, reason: str) -> None:
        if reason != SHUTDOWN:
            log.warning(
                "operator lease %s/%s lost: no renewal within %gs (%s)",
                self.config.namespace,
                self.config.name,
                self.config.timing.renew_deadline,
                self.campaign.last_error or "no answer",
            )
        await self.on_stopped()

    def released(self, outcome: bool | Exception) -> None:
        """Giving the Lease up lets a standby take over at its next read (best effort)."""
        if isinstance(outcome, Exception):
            log.warning("operator lease not released (it expires by itself): %s", outcome)
        elif outcome:
            log.info("operator lease %s released", self.writer)
