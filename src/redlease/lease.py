"""The :class:`Lease` a successful acquisition returns, and the pure renewal schedule."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from redlease.protocol import Grant


@dataclass
class Lease:
    """A held lease: what the holder knows locally.

    ``deadline`` is on the monotonic clock (see :func:`redlease.protocol.local_deadline`); past
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
        )

    def remaining(self) -> float:
        """Seconds left before the local deadline (negative once passed)."""
        return self.deadline - time.monotonic()

    @property
    def valid(self) -> bool:
        """True while the lease has not been marked lost and its local deadline is ahead."""
        return not self.lost and time.monotonic() < self.deadline


@dataclass(frozen=True, slots=True)
class RenewSchedule:
    """When to renew: at ``fraction`` of the TTL after the last successful renewal was sent,
    retrying failed attempts every ``retry`` seconds until the local deadline.
    """

    ttl: float
    fraction: float = 1 / 3

    @property
    def interval(self) -> float:
        return self.ttl * self.fraction

    @property
    def retry(self) -> float:
        return max(0.01, self.interval / 4)

    def next_attempt(self, last_sent: float, now: float, deadline: float, failed: bool) -> float:
        """Monotonic time of the next extend attempt (never after ``deadline``)."""
        due = now + self.retry if failed else last_sent + self.interval
        return min(due, deadline)
