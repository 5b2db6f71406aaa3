"""The candidate/leader state machine of one sidecar (pure: no I/O, no sleeping).

When to renew and when a term ends are the one elector's
(:class:`redlease.core.term.Election`: renew a retry period after the last attempt was
sent, lead until ``renew_deadline`` after the last successful send or the lease's own local
deadline, whichever comes first; a late success does not revive; a refusal or a clock step
ends the term). This module adds what only the sidecar does: when to try to acquire (woken
early by the release notification; paused, deferring to a preferred holder, backing off after
an outage), the hand-off to the preferred holder, the drain before a planned step-down
(:class:`Drain`: ``leader: false`` published, the lease still renewed until the app is done or
the drain's end), the lock view read after the grant that
must show this term's lease, and the ``/status`` document.

The driver (:mod:`redlease.sidecar.elector`: the one campaign loop,
:class:`redlease.election.campaign.Campaign`) asks :meth:`Candidate.candidate` (whether and how long
to acquire) and :meth:`Candidate.step_down` (whether to hand off) as its policy; when to renew
and how long a renewal may take are the term machine's (:attr:`Candidate.timer`, which the
campaign drives). Every call that changes who leads returns a :class:`Transition` for the
driver to log and publish. Times are passed in, so tests drive it with a fake clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from redlease.core import view as lockview
from redlease.core.lease import Lease
from redlease.core.state import Holder
from redlease.core.term import Action, Election
from redlease.core.timing import backoff, elector_periods, read_fresh
from redlease.core.view import LockView
from redlease.election.campaign import Defer
from redlease.sidecar.config import ElectionConfig


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
class Drain:
    """A planned step-down waiting for the app: ``leader: false, draining: true`` is published
    while the lease is still renewed (nobody else is granted it), until the app says it is done
    or ``until`` (monotonic) passes."""

    reason: str
    timeout: float
    until: float
    drained: bool = False


@dataclass(frozen=True, slots=True)
class Observation:
    """The latest lock view and the monotonic time its read started."""

    view: LockView
    at: float


class Candidate:
    """Decides what one candidate does next; holds what it knows about the lock."""

    def __init__(self, config: ElectionConfig) -> None:
        self.config = config
        # the one state of a term: the campaign drives it (every grant updates it alone)
        self.timer: Election[Lease] = Election(*elector_periods(config.timing))
        self.token: int | None = (
            None  # the fencing token of the term announced (elected, not ended)
        )
        self.observed: Observation | None = None
        self.failures = 0  # consecutive outage errors (drives the back-off)
        self.retry_at = 0.0
        self.last_holder: str | None = None
        self.drain: Drain | None = None  # set only while a term runs
        self.own_tokens: deque[int] = deque(maxlen=16)  # tokens of this process's latest terms

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
        self.timer.retime(*elector_periods(config.timing))

    # -- questions ----------------------------------------------------------------------------

    @property
    def term(self) -> Lease | None:
        """The announced term's latest grant (the term machine's observed record: renewals
        update it there), or None when no term was announced."""
        return self.timer.observed if self.token is not None else None

    def leading(self, now: float) -> bool:
        """Leader iff a term was announced and the term machine says it runs."""
        return self.token is not None and self.timer.leading(now)

    def leads_until(self) -> float:
        """The term's local deadline (monotonic; leader strictly before it unless renewed);
        ``-inf`` without a term."""
        return self.timer.deadline if self.token is not None else -math.inf

    def draining(self, now: float) -> bool:
        """Leading, but told the app it no longer leads and waiting for it to finish."""
        return self.drain is not None and self.leading(now)

    def drain_end(self) -> float:
        """When the drain ends without the app: its timeout, or one retry period before the
        term's deadline if that comes first (renewals failing), so the lease is released, not
        lost (tests/sidecar/test_election.py)."""
        assert self.drain is not None
        return min(self.drain.until, self.timer.deadline - self.config.timing.retry_period)

    def preferred_alive(self, now: float) -> bool:
        """The configured preferred holder (not us) is a live candidate, as last read; with
        several holders, one that is not among them yet (docs/holders.md)."""
        preferred = self.config.preferred_holder
        if not preferred or preferred == self.identity or self.observed is None:
            return False
        view = self.observed.view
        fresh = now - self.observed.at < self.config.timing.ttl
        if self.config.holders > 1 and any(h.identity == preferred for h in view.holders):
            return False  # it holds a slot already: nobody needs to make room
        return fresh and preferred in view.candidates

    def yields_slot(self) -> bool:
        """The holder that makes room for the preferred holder: the one leader with one holder;
        with several, only the newest (the highest token) of them, so one slot is freed, not
        all of them (every replica reads the same holders)."""
        if self.config.holders == 1 or self.token is None or self.observed is None:
            return self.config.holders == 1
        tokens = [h.fencing_token for h in self.observed.view.holders]
        return bool(tokens) and max(tokens) == self.token

    def connected(self, now: float) -> bool:
        """Leading (its renewals reach a quorum), or a quorum of the nodes answered the latest
        read and that read is recent."""
        if self.leading(now):
            return True
        obs = self.observed
        if obs is None or now - obs.at > read_fresh(self.config.timing):
            return False
        return obs.view.nodes.reachable

    def conflict(self, now: float) -> str | None:
        """Why this sidecar cannot lead although the lock shows its own identity: the latest
        read lists ``identity`` with a token none of this process's terms had, i.e. another
        process runs with the same ``--identity`` (or an earlier run's lease has not expired
        yet). None otherwise, and while leading."""
        obs = self.observed
        if obs is None or obs.view.unknown is not None or self.leading(now):
            return None
        view = obs.view
        listed = view.holders or (
            (Holder(view.holder, view.fencing_token),)
            if view.holder is not None and view.fencing_token is not None
            else ()
        )
        for h in listed:
            if h.identity == self.identity and h.fencing_token not in self.own_tokens:
                return (
                    f"identity {self.identity!r} holds lock {self.lock!r} under another owner "
                    f"(fencing token {h.fencing_token}): another process runs with this "
                    "--identity, or an earlier run's lease has not expired yet"
                )
        return None

    def backoff(self) -> float:
        """Delay before the next attempt after ``failures`` outage errors in a row."""
        return backoff(self.config.timing, self.failures)

    # -- the state machine --------------------------------------------------------------------

    def check(self, now: float) -> Transition | None:
        """End the term if it is over: its deadline passed, or a late grant found it so (call
        before anything that reports state)."""
        if self.token is None:
            return None
        step = self.timer.next(now)
        return self._end("lost", step.reason) if step.action is Action.LOST else None

    def step_down(self, now: float) -> str | None:
        """While a term runs: why to step down now (the hand-off to the preferred holder when a
        renewal is due, the end of a drain), or None to go on renewing."""
        step = self.timer.next(now)
        if step.action is not Action.RENEW:
            return None  # over: the next check() ends the term
        if self.drain is not None:
            return self._drain_over(now)
        if step.at <= now and self.preferred_alive(now) and self.yields_slot():
            return f"hand-off to preferred holder {self.config.preferred_holder!r}"
        return None

    def candidate(self, now: float) -> float | Defer:
        """While no term runs: how long an acquire may wait for a release (a retry period), or
        :class:`Defer`: not now (backing off after an outage, paused, deferring to the
        preferred holder)."""
        timing = self.config.timing
        if now < self.retry_at:
            return Defer(self.retry_at - now, "backing off after an outage")
        if self.config.paused:
            return Defer(timing.retry_period, "paused")
        if self.preferred_alive(now):
            return Defer(timing.retry_period, "deferring to the preferred holder")
        return timing.retry_period

    def acquired(self, now: float) -> Transition | None:
        """The campaign's term machine began a term (its observed record is the grant, in hand
        at ``now``): announce it; None when the grant was void on arrival (the machine ends
        the term at its next step and the driver gives the lease back)."""
        self.reachable()
        lease = self.timer.observed
        if lease is None or not self.timer.leading(now):
            return None
        self.token = lease.fencing_token
        self.last_holder = self.identity
        self.own_tokens.append(lease.fencing_token)
        return self._transition("elected", lease.fencing_token, "acquired the lease")

    def begin_drain(self, now: float, timeout: float, reason: str) -> bool:
        """Start draining before the planned step-down ``reason`` (hand-off or shutdown), for at
        most ``timeout`` seconds; False (nothing changes) when not leading, already draining,
        or ``timeout`` is 0 (drain off)."""
        if timeout <= 0 or self.drain is not None or not self.leading(now):
            return False
        self.drain = Drain(reason, timeout, now + timeout)
        return True

    def app_drained(self, now: float) -> bool:
        """The app says its work is done: the drain ends at the next step. False when not
        draining."""
        if not self.draining(now):
            return False
        assert self.drain is not None
        self.drain.drained = True
        return True

    def stepped_down(self, reason: str) -> Transition | None:
        """This process released (hand-off or shutdown)."""
        if self.token is None:
            return None
        return self._end("stepped_down", reason)

    def ended(self, kind: str, reason: str) -> Transition | None:
        """The driver ended the term (``kind``: ``lost`` or ``stepped_down``); None if none ran."""
        return None if self.token is None else self._end(kind, reason)

    def outage(self) -> None:
        self.failures += 1

    def reachable(self) -> None:
        self.failures = 0
        self.retry_at = 0.0

    def failed_attempt(self, now: float) -> float:
        """An acquire or read hit an outage: returns the back-off before the next attempt."""
        self.outage()
        delay = self.backoff()
        self.retry_at = now + delay
        return delay

    def observe(self, view: LockView, now: float) -> Transition | None:
        """A fresh lock view (read at ``now``); returns an ``observed`` transition when the
        holder it names changed. A view that cannot name the holder changes nothing.

        While leading, a view read after the grant that does not show this term's lease (another
        holder, another token, or none) means Redis no longer has it (restarted without its
        data, failed over, its clock stepped): the term ends at once (``lost``), not at the
        next renewal.
        """
        self.observed = Observation(view, now)
        if view.unknown is not None:
            return None
        holder = view.holder
        token = self.token
        if (
            token is not None
            and self.leading(now)
            and now > self.timer.began  # read after the grant was in hand: it must show it
            and not self._shown(view, token)
        ):
            shows = f"{holder!r} (token {view.fencing_token})" if holder else "no holder"
            if self.config.holders > 1:
                shows = "holders " + (
                    ", ".join(f"{h.identity!r} (token {h.fencing_token})" for h in view.holders)
                    or "none"
                )
            return self._end(
                "lost",
                f"the lock view shows {shows}: Redis lost this lease (restarted without its "
                "data, failed over, or its clock stepped)",
            )
        if holder == self.identity or holder == self.last_holder:
            return None
        self.last_holder = holder
        if self.leading(now):
            return None
        return Transition(
            "observed",
            self.lock,
            self.identity,
            view.fencing_token,
            "new holder" if holder else "lock is free",
            holder,
        )

    def _shown(self, view: LockView, token: int) -> bool:
        """The view shows this term's lease: as its holder, or (several holders) among them."""
        if self.config.holders > 1:
            return any(
                h.identity == self.identity and h.fencing_token == token for h in view.holders
            )
        return view.holder == self.identity and view.fencing_token == token

    # -- reporting ----------------------------------------------------------------------------

    def view(self) -> LockView:
        """The latest lock view (an empty one before the first read)."""
        if self.observed is not None:
            return self.observed.view
        cfg = self.config
        return lockview.empty(cfg.keys, cfg.target.total, cfg.target.quorum)

    # -- internals ----------------------------------------------------------------------------

    def _end(self, kind: str, reason: str) -> Transition:
        token, self.token = self.token, None
        self.drain = None
        self.timer.lose(reason)  # the driver resets it once it handled the end
        self.last_holder = None
        return self._transition(kind, token, reason)

    def _drain_over(self, now: float) -> str | None:
        """While draining: renew as usual until the app is done or :meth:`drain_end`, then
        step down (with this reason)."""
        drain = self.drain
        assert drain is not None
        end = self.drain_end()
        if drain.drained:
            return f"{drain.reason}: the app drained"
        if now >= end:
            why = "timed out" if end >= drain.until else "ended before the lease's deadline"
            return f"{drain.reason}: drain {why} ({drain.timeout:g}s)"
        return None

    def _transition(self, kind: str, token: int | None, reason: str) -> Transition:
        holder = self.identity if kind == "elected" else None
        return Transition(kind, self.lock, self.identity, token, reason, holder)
