"""The elector's state machine: when to acquire, when to renew, when leadership ends. Pure.

client-go's ``tryAcquireOrRenew`` loop with the decisions taken out of the I/O: the driver
gives :class:`Election` the monotonic ``now`` and the outcome of each attempt, and asks it what
to do next and when; the driver does the I/O against its backend (a Redis lease, a Kubernetes
Lease). The rules, one place for every surface:

- a leader renews ``renew_every`` after the last successful attempt was *sent*, and retries a
  failed one ``retry_every`` after it (after its send, when the driver reports that time),
  never after its deadline; changed periods apply from the next decision on;
- the deadline is set from the send time of the successful attempt (``sent_at +
  renew_deadline``, capped by the lease's own local deadline: send time plus TTL minus drift);
- at the deadline the term ends; a success that arrives after it does not resurrect it;
- a refusal (the lock is not ours, the server clock stepped) ends the term at once, with its
  reason; every other error (an outage, a timeout, a reply not understood) proves nothing about
  the lease and is retried until the deadline (:func:`classify`: client-go's rule).

The machine is the one state of a term: each success updates it, and it keeps the record of the
latest grant (:attr:`Election.observed`: client-go's ``observedRecord``, here the backend's
record of the lease, e.g. a :class:`~redlease.core.lease.Lease`) and when the term began; what
an owner shows of the term (the sidecar's ``/status``) is read from it, never kept beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from redlease.errors import ClockStepped, NotOwned

DEADLINE_PASSED = "local deadline passed before a renewal succeeded"
R = TypeVar("R")


class Action(Enum):
    """What the driver does next."""

    ACQUIRE = "acquire"
    RENEW = "renew"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Step:
    """The next thing to do: ``action`` at monotonic ``at``; ``reason`` when it is a loss."""

    action: Action
    at: float
    reason: str = ""


def classify(exc: BaseException) -> str | None:
    """The loss reason an attempt's error means, or None to retry it until the deadline.

    The one rule for every renewer (library renewers, the public elector, the sidecar, `redlease
    run`): only a refusal ends a term at once -- :class:`NotOwned` (the lease expired or was
    taken over) and its :class:`ClockStepped` (the server's clock stepped). Any other error (an
    outage, a timeout, a reply not understood, a bug in a client library) says nothing about who
    holds the lease, so it is retried every retry period until the local deadline, which always
    comes before the lease could be granted elsewhere (client-go: only the renew deadline ends
    a term)."""
    if isinstance(exc, ClockStepped):
        return exc.message
    if isinstance(exc, NotOwned):
        return "renewal refused: lease expired or taken over"
    return None


class Election(Generic[R]):
    """One candidate's term: idle (acquiring) or leading until :attr:`deadline`.

    ``renew_every``: delay from a successful attempt's send time to the next renewal;
    ``retry_every``: delay after a failed attempt (also the acquire period);
    ``renew_deadline``: how long after a successful send the term lasts (None: only the
    lease's own local deadline given to :meth:`succeeded` bounds it). ``R``: the record a
    success carries (:attr:`observed`).
    """

    def __init__(
        self, renew_every: float, retry_every: float, renew_deadline: float | None = None
    ) -> None:
        self.renew_every = renew_every
        self.retry_every = retry_every
        self.renew_deadline = renew_deadline
        self.deadline = -math.inf  # monotonic: leader strictly before this instant
        self.anchor = -math.inf  # the next attempt is due a period after this instant
        self.retrying = False  # the last attempt failed: that period is retry_every
        self.term = False  # a term began and has not ended
        self.reason = ""
        # the latest grant (of the running term, or the last one: kept after it ended): its
        # record, its own local deadline, and when the term it belongs to began
        self.observed: R | None = None
        self.lease_deadline = math.inf
        self.began = -math.inf

    @property
    def next_at(self) -> float:
        """When the next attempt is due (before the deadline caps it)."""
        return self.anchor + (self.retry_every if self.retrying else self.renew_every)

    def retime(self, renew_every: float, retry_every: float, renew_deadline: float | None) -> None:
        """New periods: they apply to the next attempt; the deadline changes with the next
        success (a running term keeps the one it was granted)."""
        self.renew_every = renew_every
        self.retry_every = retry_every
        self.renew_deadline = renew_deadline

    def leading(self, now: float) -> bool:
        """True while the term runs: leader strictly before the deadline."""
        return self.term and now < self.deadline

    def next(self, now: float) -> Step:
        """What to do at or after ``now``."""
        if self.term and now >= self.deadline:
            self.lose(DEADLINE_PASSED)
        if self.reason:
            return Step(Action.LOST, now, self.reason)
        if not self.term:
            return Step(Action.ACQUIRE, max(now, self.next_at))
        return Step(Action.RENEW, min(max(now, self.next_at), self.deadline))

    def budget(self, now: float) -> float | None:
        """How long an attempt sent at ``now`` may take: up to the deadline while leading
        (None once it passed), ``retry_every`` while acquiring."""
        if not self.term:
            return self.retry_every
        return self.deadline - now if now < self.deadline else None

    def succeeded(
        self, sent_at: float, now: float, lease_deadline: float = math.inf, record: R | None = None
    ) -> bool:
        """An attempt sent at ``sent_at`` was granted (``lease_deadline``: the lease's local
        deadline, from :func:`~redlease.core.timing.local_deadline`; ``record``: what the
        backend knows of the lease, kept as :attr:`observed`). False when it came too late:
        the term already ended, or the grant is void by ``now``."""
        if self.reason or (self.term and now >= self.deadline):
            self.next(now)
            return False
        deadline = lease_deadline
        if self.renew_deadline is not None:
            deadline = min(deadline, sent_at + self.renew_deadline)
        if now >= deadline:
            if self.term:
                self.lose(DEADLINE_PASSED)
            return False
        if not self.term:
            self.began = now
        self.term = True
        self.deadline = deadline
        self.anchor = sent_at
        self.retrying = False
        self.observed, self.lease_deadline = record, lease_deadline
        return True

    def failed(self, now: float, reason: str | None) -> Step:
        """An attempt failed: ``reason`` None for a transient error (retry), else why the
        lock is gone (see :func:`classify`). The next attempt is due ``retry_every`` after
        ``now``: the failure's time, or the failed attempt's send time (client-go's ticker:
        a slow failure is retried at once)."""
        if reason is not None and self.term:
            self.lose(reason)
        self.anchor, self.retrying = now, True
        return self.next(now)

    def start(self, sent_at: float, deadline: float) -> None:
        """Begin a term from a grant taken elsewhere (an acquire before the renewer started);
        :meth:`next` reports it lost at once if ``deadline`` has already passed."""
        self.term, self.reason = True, ""
        self.deadline = deadline
        self.anchor = sent_at
        self.retrying = False

    def lose(self, reason: str) -> None:
        """End the term now (idempotent: the first reason stays)."""
        if self.term and not self.reason:
            self.reason = reason
        self.deadline = -math.inf

    def reset(self) -> None:
        """After a loss was handled, run for the lock again."""
        self.term = False
        self.reason = ""
        self.deadline = -math.inf
