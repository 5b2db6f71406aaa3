"""Opt-in Kubernetes views of the sidecar's leadership: a Lease mirror and Events.

**Lease mirror** (``--lease-mirror``): while this sidecar leads, it keeps a
``coordination.k8s.io/v1`` Lease named after the lock (holderIdentity, leaseDurationSeconds,
acquireTime, renewTime, and leaseTransitions: the lock's holder changes as Redis counts them) so
that ``kubectl get lease`` and client-go tooling see the leader. Redis stays the source of
truth: the mirror only copies the leader's status document; it is written on change and at most
once per retry period (a renewal is a change of renewTime, so a leader writes once per retry
period, as client-go's own election does); standbys never write. Every write is a
compare-and-swap on ``resourceVersion``, by the one Lease writer
(:class:`~redlease.kube.leasewriter.LeaseWriter`). On a clean shutdown the leader, if the Lease
still names it, marks it released. The API being slow or down never touches the election: writes
happen in their own task, failures are logged and retried with back-off.

**Events** (``--events``): "became leader" / "stopped leading" on the lock's object (the
DistributedLock with ``--lock-ref``, else the Lease named after the lock), reason
``LeaderElection`` as client-go posts them. A token bucket (:class:`RateLimit`: 8 at once, then
one per 30 s) bounds what a flapping sidecar can post; suppressed events are counted in the
next one. Posting is best effort: a bounded queue, dropped (and logged) when the API fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from redlease.core.times import parse_time
from redlease.core.timing import next_backoff
from redlease.errors import KubeConflict, KubeError
from redlease.kube.client import KubeClient
from redlease.kube.events import event_body
from redlease.kube.lease import LeaseRecord, duration_seconds
from redlease.kube.leasewriter import LeaseWriter
from redlease.kube.names import GROUP, KIND, VERSION
from redlease.kube.verbs import create
from redlease.sidecar.election import Transition

log = structlog.get_logger("redlease.sidecar")
LABELS = {"app.kubernetes.io/managed-by": "redlease"}


def leader_record(doc: Mapping[str, Any], ttl: float) -> LeaseRecord | None:
    """The Lease record a status document asks for: None unless this sidecar leads."""
    if not doc.get("leader"):
        return None
    transitions = doc.get("transitions")
    return LeaseRecord(
        holder=str(doc["identity"]),
        duration=duration_seconds(ttl),
        acquire_time=parse_time(doc.get("acquired_at")),
        renew_time=parse_time(doc.get("renewed_at")),
        transitions=transitions if isinstance(transitions, int) else 0,
    )


class LeaseMirror:
    """Copies this sidecar's leadership into a Lease (see the module docstring)."""

    def __init__(
        self, client: KubeClient, namespace: str, name: str, retry_period: float, ttl: float
    ) -> None:
        self.writer = LeaseWriter(client, namespace, name, LABELS, timeout=5.0)
        self.retry_period = retry_period
        self.ttl = ttl
        self.desired: LeaseRecord | None = None
        self.written: LeaseRecord | None = None
        self.writes = 0
        self._lease: dict[str, Any] | None = None  # the object as our last write left it
        self._last_write = -float("inf")
        self._wake = asyncio.Event()
        self._failing = False

    def update(self, doc: Mapping[str, Any], ttl: float, retry_period: float) -> None:
        """The latest status document (cheap; called on every change)."""
        self.ttl, self.retry_period = ttl, retry_period
        record = leader_record(doc, ttl)
        if record != self.desired:
            self.desired = record
            self._wake.set()

    async def run(self) -> None:
        delay = self.retry_period
        while True:
            await self._wake.wait()
            # the rate limit: at most one write per retry period, always of the latest state
            await asyncio.sleep(max(0.0, self._last_write + self.retry_period - time.monotonic()))
            self._wake.clear()
            record = self.desired
            if record is None or record == self.written:
                continue  # standbys never write
            try:
                await self._write(record)
            except KubeError as exc:
                if not self._failing:
                    log.warning("lease mirror not written", lease=self.where, error=str(exc))
                self._failing = True
                self._lease = None
                await asyncio.sleep(delay)
                delay = next_backoff(delay, self.ttl, self.retry_period)
                self._wake.set()
                continue
            if self._failing:
                log.info("lease mirror written again", lease=self.where)
            self._failing = False
            delay = self.retry_period

    @property
    def where(self) -> str:
        return str(self.writer)

    async def _write(self, record: LeaseRecord) -> None:
        self._last_write = time.monotonic()
        for _ in range(3):  # a conflict means someone wrote first: read again and decide again
            lease = self._lease or await self.writer.read()
            try:
                self._lease = await self.writer.write(lease, record)
            except KubeConflict:
                self._lease = None
                continue
            self.written = record
            self.writes += 1
            return
        raise KubeError(f"Lease {self.where}: kept changing under us")

    async def final(self, timeout: float = 2.0) -> None:
        """On a clean shutdown (after the Redis lease was released): mark the Lease released
        if it still names this sidecar. Bounded; a failure just leaves it to expire."""
        if self.written is None or self.written.holder is None:
            return
        with contextlib.suppress(KubeError, TimeoutError):
            async with asyncio.timeout(timeout):
                await self.writer.release(self.written.holder, time.time())


@dataclass(slots=True)
class RateLimit:
    """A token bucket: ``burst`` at once, then one more every ``every`` seconds."""

    burst: int = 8
    every: float = 30.0
    tokens: float = 8.0
    at: float = 0.0

    def allow(self, now: float) -> bool:
        if self.at:
            self.tokens = min(self.burst, self.tokens + (now - self.at) / self.every)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def involved_lease(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "namespace": namespace,
            "name": name}  # fmt: skip


def involved_lock(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "namespace": namespace, "name": name}


class LeaderEvents:
    """Posts became/stopped-leading Events (see the module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        involved: Mapping[str, Any],
        host: str | None = None,
        limit: RateLimit | None = None,
        queue_size: int = 16,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.involved = dict(involved)
        self.host = host
        self.limit = limit or RateLimit()
        self.suppressed = 0
        self.posted = 0
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(queue_size)

    def transition(self, transition: Transition) -> None:
        """Queue the Event for ``transition`` (this sidecar's own changes only)."""
        if transition.kind == "elected":
            kind, message = "Normal", f"{transition.identity} became leader"
            if transition.fencing_token is not None:
                message += f" (fencing token {transition.fencing_token})"
        elif transition.kind in ("lost", "stepped_down"):
            kind = "Warning" if transition.kind == "lost" else "Normal"
            message = f"{transition.identity} stopped leading: {transition.reason}"
        else:
            return
        if not self.limit.allow(time.monotonic()):
            if not self.suppressed:
                log.warning("leader events rate-limited", lock=transition.lock)
            self.suppressed += 1
            return
        if self.suppressed:
            message += f" ({self.suppressed} earlier event(s) suppressed by the rate limit)"
            self.suppressed = 0
        try:
            self._queue.put_nowait(self._event(kind, message, transition.identity))
        except asyncio.QueueFull:
            self.suppressed += 1

    def _event(self, kind: str, message: str, identity: str) -> dict[str, Any]:
        involved = {"namespace": self.namespace, **self.involved}
        return event_body(
            involved,
            type=kind,
            reason="LeaderElection",
            message=message,
            component="redlease-sidecar",
            instance=identity,
            host=self.host or "",
        )

    async def run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await create.event(self.client, self.namespace, event, timeout=5.0)
                self.posted += 1
            except KubeError as exc:
                log.warning("leader event not posted", message=event["message"], error=str(exc))

    async def final(self, timeout: float = 2.0) -> None:
        """Post what is queued (the stopped-leading event of a shutdown), bounded."""
        with contextlib.suppress(KubeError, TimeoutError):
            async with asyncio.timeout(timeout):
                while not self._queue.empty():
                    await create.event(self.client, self.namespace, self._queue.get_nowait())
                    self.posted += 1
