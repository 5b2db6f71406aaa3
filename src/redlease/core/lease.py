"""The :class:`Lease` a successful acquisition returns, and the pure renewal schedule."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redlease.core import _log as log
from redlease.core.clock import ServerTime
from redlease.core.flows import Grant
from redlease.core.term import DEADLINE_PASSED, Action, Election, classify
from redlease.core.timing import RenewSchedule
from redlease.errors import LeaseLost, NotOwned


@dataclass
class Lease:
    """A held lease: what the holder knows locally.

    ``deadline`` is on the monotonic clock (see :func:`redlease.core.timing.local_deadline`); past
    it this process must act as if it no longer holds the lock, whatever Redis says later.
    ``fencing_token`` is strictly greater than every token issued before for this lock: pass it
    to the protected resource and let the resource refuse lower ones.
    """

    lock: str
    fencing_token: int
    ttl: float
    deadline: float
    acquired_at_ms: int  # server time (Redis TIME) of the acquisition
    count: int = 1
    transitions: int = 0
    lost: bool = field(default=False)
    # monotonic send time of the request that set ``deadline``, and its server time (Redis TIME)
    sent_at: float = 0.0
    renewed_ms: int = 0
    # the last reading of the server's clock (one server only): renewals detect clock steps
    server_time: ServerTime | None = field(default=None, repr=False)

    @classmethod
    def from_grant(cls, lock: str, grant: Grant, ttl: float) -> Lease:
        return cls(
            lock=lock,
            fencing_token=grant.fence,
            ttl=ttl,
            deadline=grant.deadline,
            acquired_at_ms=grant.server_ms,
            count=grant.count,
            transitions=max(grant.transitions, 0),
            server_time=grant.server_time(),
            sent_at=grant.sent_at,
            renewed_ms=grant.server_ms,
        )

    def remaining(self) -> float:
        """Seconds left before the local deadline (negative once passed)."""
        return self.deadline - time.monotonic()

    @property
    def valid(self) -> bool:
        """True while the lease has not been marked lost and its local deadline is ahead."""
        return not self.lost and time.monotonic() < self.deadline


class RenewLoop:
    """The library renewer over the elector state machine
    (:class:`~redlease.core.term.Election`), shared by the thread and asyncio renewers.

    The driver sleeps :meth:`next_wait` seconds, calls :meth:`begin` (how long the extend may
    take: never past the local deadline), runs the extend bounded by that, and reports to
    :meth:`end`. A non-``None`` reason from :meth:`end` means the lease is lost: the driver
    calls :meth:`lose` once and stops.
    """

    def __init__(
        self, lock: str, lease: Lease, fraction: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lock = lock
        self.lease = lease
        self.schedule = RenewSchedule(lease.ttl, fraction)
        self.clock = clock
        self.election: Election[object] = Election(self.schedule.interval, self.schedule.retry)
        self.sent = clock()
        self.election.start(self.sent, lease.deadline)

    def next_wait(self) -> float:
        now = self.clock()
        return max(0.0, self.election.next(now).at - now)

    def begin(self) -> float | None:
        """Start an attempt: the seconds its extend may take, None if the deadline has passed."""
        self.sent = self.clock()
        return self.election.budget(self.sent)

    def end(self, budget: float | None, error: BaseException | None) -> str | None:
        """After an attempt (``error`` None: extended): None to go on, else the loss reason."""
        now = self.clock()
        if budget is not None and error is None:
            if self.election.succeeded(self.sent, now, self.lease.deadline):
                return None
        elif budget is not None and error is not None:
            reason = classify(error)
            if reason is None:
                log.warning("renewal failed, retrying", lock=self.lock, error=str(error))
            self.election.failed(now, reason)
        step = self.election.next(now)
        return step.reason or DEADLINE_PASSED if step.action is Action.LOST else None

    def lose(self, why: str, on_lost: Callable[[LeaseLost], None] | None) -> LeaseLost:
        """Mark the lease lost, write the log line and call ``on_lost`` (errors are logged)."""
        self.lease.lost = True
        err = LeaseLost(self.lock, why)
        log.warning(
            "lease lost", lock=self.lock, fencing_token=self.lease.fencing_token, reason=why
        )
        if on_lost is not None:
            try:
                on_lost(err)
            except Exception:  # noqa: BLE001 - a user callback must not kill the renewer
                log.exception("on_lost callback failed", lock=self.lock)
        return err


class RenewerBase:
    """What the thread and task renewers share: the hold they renew (of ``owner``, resolved in
    the caller's thread or task), its :class:`RenewLoop`, and the loss callback."""

    def __init__(
        self,
        handle: Any,
        *,
        on_lost: Callable[[LeaseLost], None] | None = None,
        fraction: float = 1 / 3,
        owner: Any = None,
    ) -> None:
        lease = handle.lease(owner)
        if lease is None:
            raise NotOwned(handle.name, "cannot renew a lock this owner does not hold")
        self.handle = handle
        self.lease: Lease = lease
        self.owner = handle._resolve_owner(owner)
        self.on_lost = on_lost
        self.loop = RenewLoop(handle.name, lease, fraction)
