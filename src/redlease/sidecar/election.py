"""The candidate/leader state machine of one sidecar (pure: no I/O, no sleeping).

Modelled on client-go's leaderelection: a candidate tries to acquire every ``retry_period``
(woken early by the release notification), the leader renews every ``retry_period`` and stops
being leader at its local *renew deadline* (``renew_deadline`` after the last successful renewal
was sent), which always comes before the lease could expire in Redis and be granted elsewhere.

The driver (:mod:`redlease.sidecar.elector`) asks :meth:`Election.next_action`, does the I/O and
reports the outcome; every call that changes who leads returns a :class:`Transition` for the
driver to log and publish. Times are passed in, so tests drive it with a fake clock.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from redlease.core.state import LockState
from redlease.errors import NotOwned
from redlease.sidecar.config import ElectionConfig

# --- what the driver is asked to do --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acquire:
    """Try to acquire, waiting (woken by notification) at most ``timeout`` seconds."""

    timeout: float


@dataclass(frozen=True, slots=True)
class Renew:
    """Sleep ``wait`` seconds, then extend; the extend may take at most ``budget`` seconds."""

    wait: float
    budget: float


@dataclass(frozen=True, slots=True)
class StepDown:
    """Release the lease now (planned hand-off)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Idle:
    """Do nothing for ``wait`` seconds (paused, deferring to the preferred holder, backing off)."""

    wait: float
    reason: str


Action = Acquire | Renew | StepDown | Idle


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of who leads: ``elected``, ``lost``, ``stepped_down`` or ``observed``."""

    kind: str
    lock: str
    identity: str
    fencing_token: int | None
    reason: str = ""
    holder: str | None = None


@dataclass(slots=True)
class Term:
    """This process's current leadership term."""

    fencing_token: int
    acquired_ms: int
    renewed_ms: int
    transitions: int
    last_sent: float  # monotonic send time of the last successful acquire/extend
    last_attempt: float  # monotonic time of the last extend attempt
    renew_by: float  # local renew deadline: leader strictly before this instant
    lease_deadline: float  # local lease deadline (Lease.deadline)


@dataclass(frozen=True, slots=True)
class Observation:
    state: LockState
    at: float  # monotonic time of the read


class Election:
    """Decides what one candidate does next; holds what it knows about the lock."""

    def __init__(self, config: ElectionConfig) -> None:
        self.config = config
        self.term: Term | None = None
        self.observed: Observation | None = None
        self.healthy = 0
        self.failures = 0  # consecutive outage errors (drives the back-off)
        self.retry_at = 0.0
        self.last_holder: str | None = None
        self.stopping = False

    # -- configuration ------------------------------------------------------------------------

    @property
    def lock(self) -> str:
        return self.config.lock

    @property
    def identity(self) -> str:
        return self.config.identity

    def update(self, config: ElectionConfig) -> None:
        """Adopt new settings (from a changed DistributedLock spec); applies from now on."""
        self.config = config

    # -- questions ----------------------------------------------------------------------------

    def leading(self, now: float) -> bool:
        """Leader iff a term exists and its local renew deadline has not passed."""
        return self.term is not None and now < self.term.renew_by

    def preferred_alive(self, now: float) -> bool:
        """The configured preferred holder (not us) is a live candidate, as last read."""
        preferred = self.config.preferred_holder
        if not preferred or preferred == self.identity or self.observed is None:
            return False
        fresh = now - self.observed.at < self.config.timing.ttl
        return fresh and preferred in self.observed.state.candidates

    def backoff(self) -> float:
        """Delay before the next attempt after ``failures`` outage errors in a row."""
        timing = self.config.timing
        cap = max(timing.retry_period, min(timing.ttl, 10.0))
        return float(min(cap, timing.retry_period * 2 ** min(self.failures - 1, 8)))

    # -- the state machine --------------------------------------------------------------------

    def check(self, now: float) -> Transition | None:
        """Step down if the renew deadline passed (call before anything that reports state)."""
        if self.term is not None and now >= self.term.renew_by:
            return self._end("lost", "renew deadline passed without a successful renewal")
        return None

    def next_action(self, now: float) -> Action:
        timing = self.config.timing
        term = self.term
        if term is not None:
            due = min(term.last_attempt + timing.retry_period, term.renew_by)
            wait = max(0.0, due - now)
            if wait == 0.0 and self.preferred_alive(now):
                return StepDown(f"hand-off to preferred holder {self.config.preferred_holder!r}")
            return Renew(wait, max(0.0, term.renew_by - now - wait))
        if now < self.retry_at:
            return Idle(self.retry_at - now, "backing off after an outage")
        if self.config.paused:
            return Idle(timing.retry_period, "paused")
        if self.preferred_alive(now):
            return Idle(timing.retry_period, "deferring to the preferred holder")
        return Acquire(timing.retry_period)

    def acquired(
        self,
        *,
        fencing_token: int,
        server_ms: int,
        transitions: int,
        sent_at: float,
        lease_deadline: float,
    ) -> Transition:
        timing = self.config.timing
        self.reachable()
        self.term = Term(
            fencing_token=fencing_token,
            acquired_ms=server_ms,
            renewed_ms=server_ms,
            transitions=transitions,
            last_sent=sent_at,
            last_attempt=sent_at,
            renew_by=min(sent_at + timing.renew_deadline, lease_deadline),
            lease_deadline=lease_deadline,
        )
        self.last_holder = self.identity
        return self._transition("elected", fencing_token, "acquired the lease")

    def renew_started(self, term: Term, now: float) -> None:
        term.last_attempt = now

    def renewed(self, term: Term, *, sent_at: float, server_ms: int, lease_deadline: float) -> None:
        """A renewal succeeded; ignored if the term already ended (a late reply never revives)."""
        self.reachable()
        if term is not self.term:
            return
        term.last_sent = sent_at
        term.renewed_ms = server_ms
        term.lease_deadline = lease_deadline
        term.renew_by = min(sent_at + self.config.timing.renew_deadline, lease_deadline)

    def renew_failed(self, term: Term, exc: BaseException) -> Transition | None:
        """Refused (taken over): lost at once. Outage or timeout: keep trying until the deadline."""
        if term is not self.term:
            return None
        if isinstance(exc, NotOwned):
            return self._end("lost", "renewal refused: the lease expired or was taken over")
        self.outage()
        return None

    def stepped_down(self, reason: str) -> Transition | None:
        """This process released (hand-off or shutdown)."""
        if self.term is None:
            return None
        return self._end("stepped_down", reason)

    def outage(self) -> None:
        self.failures += 1
        self.healthy = 0

    def reachable(self) -> None:
        self.failures = 0
        self.retry_at = 0.0
        self.healthy = self.config.target.total

    def failed_attempt(self, now: float) -> float:
        """An acquire or read hit an outage: returns the back-off before the next attempt."""
        self.outage()
        delay = self.backoff()
        self.retry_at = now + delay
        return delay

    def observe(self, state: LockState, now: float) -> Transition | None:
        """A fresh STATUS read; returns an ``observed`` transition when the holder changed."""
        self.reachable()
        self.observed = Observation(state, now)
        holder = state.holder
        if holder == self.identity or holder == self.last_holder:
            return None
        self.last_holder = holder
        if self.leading(now):
            return None
        return Transition(
            "observed",
            self.lock,
            self.identity,
            state.fencing_token,
            "new holder" if holder else "lock is free",
            holder,
        )

    # -- reporting ----------------------------------------------------------------------------

    def snapshot(self, now: float, wall: float) -> dict[str, Any]:
        """The ``/status`` document (and state file) as of monotonic ``now`` / epoch ``wall``."""
        cfg = self.config
        term = self.term if self.leading(now) else None
        doc: dict[str, Any] = {
            "lock": cfg.lock,
            "identity": cfg.identity,
            "leader": term is not None,
            **empty_status(cfg.target.total, self.healthy, cfg.target.needed),
            "candidates": 0,
            "leader_until": None,
            "paused": cfg.paused,
            "preferred_holder": cfg.preferred_holder,
        }
        obs = self.observed
        if obs is not None:
            doc["transitions"] = obs.state.transitions
            doc["candidates"] = len(obs.state.candidates)
        if term is not None:
            doc.update(
                holder=cfg.identity,
                fencing_token=term.fencing_token,
                expires_in_ms=max(0, int((term.lease_deadline - now) * 1000)),
                acquired_at=iso_ms(term.acquired_ms),
                renewed_at=iso_ms(term.renewed_ms),
                transitions=max(doc["transitions"], term.transitions),
                leader_until=iso_ms(int((wall + term.renew_by - now) * 1000)),
            )
        elif obs is not None and obs.state.holder and obs.state.holder != cfg.identity:
            left = obs.state.expires_in_ms
            if left is not None:
                left -= int((now - obs.at) * 1000)
            if left is None or left > 0:
                doc.update(holder_fields(obs.state, left))
        return doc

    # -- internals ----------------------------------------------------------------------------

    def _end(self, kind: str, reason: str) -> Transition:
        term = self.term
        self.term = None
        self.last_holder = None
        return self._transition(kind, term.fencing_token if term else None, reason)

    def _transition(self, kind: str, token: int | None, reason: str) -> Transition:
        holder = self.identity if kind == "elected" else None
        return Transition(kind, self.lock, self.identity, token, reason, holder)


def empty_status(total: int, healthy: int, quorum: int) -> dict[str, Any]:
    """The holder part of a status document for a free lock (shared by /status and
    `redlease status`)."""
    return {
        "holder": None,
        "fencing_token": None,
        "expires_in_ms": None,
        "acquired_at": None,
        "renewed_at": None,
        "transitions": 0,
        "nodes": {"total": total, "healthy": healthy, "quorum": quorum},
    }


def holder_fields(state: LockState, expires_in_ms: int | None) -> dict[str, Any]:
    """The holder part of a status document from a lock state read from Redis."""
    return {
        "holder": state.holder,
        "fencing_token": state.fencing_token,
        "expires_in_ms": expires_in_ms,
        "acquired_at": iso_ms(state.acquired_ms),
        "renewed_at": iso_ms(state.renewed_ms),
    }


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as an RFC 3339 UTC timestamp with millisecond precision."""
    if ms is None:
        return None
    stamp = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
