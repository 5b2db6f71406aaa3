"""Lease timing: the TTL, the renew deadline and the retry period, and the rules between them;
the drift allowance and the local deadline of a granted lease; every period derived from them
(one module for the timing rules: docs/design.md's table points here).

Pure. client-go's leader election names the three timings and its ratios give the defaults;
every surface that takes them (the command-line flags, a DistributedLock's spec, the sidecar
and the operator's own election) checks them with :func:`validate_timing`, naming its own
fields. A lease, not Kubernetes: this is the core's. :func:`local_deadline` is when a holder
must stop trusting its lease (the flows, quorum validity, the sidecar).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from redlease.errors import ConfigError

DEFAULT_TTL = 15
# One TTL range for the library, the CLI and the CRD (seconds; the CRD takes whole seconds
# in it: 1 to 86,400): below 50 ms the drift allowance and a round trip eat the lease; a lease
# of more than a day outlives any holder that would still renew it.
TTL_RANGE = (0.05, 86400.0)


@dataclass(frozen=True, slots=True)
class Timing:
    """Lease timing in seconds, named as client-go's leader election names it.

    ``ttl`` is the lease duration in Redis; a leader renews every ``retry_period`` and steps
    down when no renewal succeeded for ``renew_deadline`` (< ttl), so it stops acting as leader
    before the lease could expire and be granted elsewhere.
    """

    ttl: float = float(DEFAULT_TTL)
    renew_deadline: float = DEFAULT_TTL * 2 / 3
    retry_period: float = DEFAULT_TTL * 2 / 15


def default_renew_deadline(ttl: float) -> float:
    """client-go's ratio (15 s lease, 10 s renew deadline): two thirds of the TTL."""
    return ttl * 2 / 3


def default_retry_period(ttl: float) -> float:
    """client-go's ratio (15 s lease, 2 s retry period): two fifteenths of the TTL."""
    return ttl * 2 / 15


def validate_timing(
    ttl: float,
    renew_deadline: float | None = None,
    retry_period: float | None = None,
    *,
    names: tuple[str, str, str] = ("--ttl", "--renew-deadline", "--retry-period"),
    bounds: tuple[float, float] = TTL_RANGE,
) -> Timing:
    """The relations every timing must satisfy: retry < renew deadline < ttl (defaults from
    :func:`default_renew_deadline` and :func:`default_retry_period`)."""
    ttl_name, deadline_name, retry_name = names
    lo, hi = bounds
    if not lo <= ttl <= hi:
        raise ConfigError(ttl_name, f"must be between {lo:g} and {hi:g} seconds, got {ttl:g}")
    deadline = default_renew_deadline(ttl) if renew_deadline is None else renew_deadline
    if not 0 < deadline < ttl:
        raise ConfigError(
            deadline_name, f"must be > 0 and below {ttl_name} ({ttl:g}), got {deadline:g}"
        )
    retry = default_retry_period(ttl) if retry_period is None else retry_period
    if not 0 < retry < deadline:
        raise ConfigError(
            retry_name, f"must be > 0 and below {deadline_name} ({deadline:g}), got {retry:g}"
        )
    return Timing(float(ttl), float(deadline), float(retry))


# --- periods derived from the timing (one place for each rule) ------------------------------


@dataclass(frozen=True, slots=True)
class RenewSchedule:
    """A library renewer's periods: renew at ``fraction`` of the TTL after the last successful
    renewal was sent (default a third), retry a failed one every quarter of that (at least
    10 ms), until the local deadline."""

    ttl: float
    fraction: float = 1 / 3

    @property
    def interval(self) -> float:
        return self.ttl * self.fraction

    @property
    def retry(self) -> float:
        return max(0.01, self.interval / 4)


def elector_periods(timing: Timing) -> tuple[float, float, float]:
    """An elector's periods (the term machine's ``renew_every``, ``retry_every``,
    ``renew_deadline``): renew and retry every retry period, lead until the renew deadline
    (client-go's three timings): the public elector, the sidecar, the operator's Lease."""
    return timing.retry_period, timing.retry_period, timing.renew_deadline


def acquire_timeout(timing: Timing) -> float:
    """How long an elector's acquire may take (the public elector, the operator's Lease):
    two retry periods."""
    return timing.retry_period * 2


def backoff(timing: Timing, failures: int) -> float:
    """The delay before the next attempt after ``failures`` (>= 1) outage errors in a row:
    the retry period doubled each time, capped at the TTL (at most 10 s, at least a retry
    period)."""
    cap = max(timing.retry_period, min(timing.ttl, 10.0))
    return float(min(cap, timing.retry_period * 2 ** min(failures - 1, 8)))


def next_backoff(delay: float, ttl: float, retry_period: float) -> float:
    """The doubling back-off of a retried write (the sidecar's Lease mirror): twice ``delay``,
    at most the TTL (or the retry period, if longer)."""
    return min(2 * delay, max(ttl, retry_period))


def spread(seconds: float, draw: Callable[[float, float], float] = random.uniform) -> float:
    """``seconds`` ± 10 %, so that candidates do not retry in lock-step."""
    return seconds * draw(0.9, 1.1)


def socket_timeout(ttl: float) -> float:
    """The sidecar's socket timeout: a third of the TTL, between 0.5 and 5 s."""
    return max(0.5, min(5.0, ttl / 3))


def release_timeout(timing: Timing) -> float:
    """How long giving a lease back may take (best effort: it expires by itself): the retry
    period, between 0.2 and 2 s."""
    return max(0.2, min(2.0, timing.retry_period))


def stall_slack(timing: Timing) -> float:
    """The watchdog's slack: an election loop whose step is overdue by more than this (two
    retry periods, at least 2 s) counts as stalled."""
    return max(2.0, 2 * timing.retry_period)


def read_fresh(timing: Timing) -> float:
    """How old a lock view may be and still count as connected: two retry periods plus 1 s."""
    return 2 * timing.retry_period + 1.0


def call_timeout(timing: Timing) -> float:
    """How long one call of an election's side work may take (a read of the lock view with
    its heartbeat, a write of the operator's Lease): a retry period, at least 1 s."""
    return max(1.0, timing.retry_period)


def heartbeat_ttl(timing: Timing) -> float:
    """How long a candidate's heartbeat lives: the TTL, or three retry periods if longer."""
    return max(timing.ttl, 3 * timing.retry_period)


def safe_grace(timing: Timing) -> float:
    """The longest grace that still ends before the lease could be granted elsewhere (half
    the time between the renew deadline and the TTL; `redlease run`)."""
    return max(0.01, (timing.ttl - timing.renew_deadline) / 2)


def drift(ttl: float) -> float:
    """Clock-drift allowance for a lease of ``ttl`` seconds: 1% of the TTL plus 2 ms."""
    return ttl * 0.01 + 0.002


def local_deadline(sent_at: float, ttl: float) -> float:
    """Monotonic time after which a lease granted to a request sent at ``sent_at`` is void.

    Measured from when the request was *sent* (the server may have started the TTL any time
    after that), minus the drift allowance.
    """
    return sent_at + ttl - drift(ttl)


# --- deadlines own the I/O -------------------------------------------------------------------
# An operation given ``timeout`` seconds returns within ``timeout + REPLY_GRACE +
# CLEANUP_GRACE`` whatever the client's socket and retry settings (redis-py 8's default
# client: 5 s socket timeouts, 10 retries with back-off): its last attempt, made at the
# deadline, waits ``REPLY_GRACE`` for its reply (connecting included), and the undo of a failed
# acquire ``CLEANUP_GRACE`` (written behind the unanswered request on the same connection, so a
# paused server that resumes still runs it, in order). Without a caller timeout every reply is
# awaited at most the TTL: a call that cannot finish before the lease would expire is an
# outage, not a wait. docs/safety.md, "Deadlines own the I/O", has the measured times.
REPLY_GRACE = 0.2
CLEANUP_GRACE = 0.2
# the GIVE_UP a listener sends for every waiter due at once (one script for them all): their
# whole allowance past the deadline, as their own last attempts and undo would have had
GIVE_UP_WAIT = REPLY_GRACE + CLEANUP_GRACE
MIN_WAIT = 0.001  # a request sent at (or after) its operation's deadline still gets this long


@dataclass(frozen=True, slots=True)
class Budget:
    """How long the I/O of one library operation may take: each reply is awaited at most
    ``cap`` seconds (connecting, handshake and all), and nothing waits past ``deadline`` (a
    monotonic time; None: only ``cap``). The drivers give every request of the operation
    :meth:`bound` and never retry on their own, so redis-py's retries cannot multiply it."""

    cap: float
    deadline: float | None = None

    def bound(
        self, requested: float | None, now: float, socket_timeout: float | None = None
    ) -> float:
        """The longest wait for one request's reply at ``now``; ``requested``: the request's own
        limit (a renewer's budget), if any, else the client's ``socket_timeout`` if shorter."""
        if requested is None:
            requested = socket_timeout
        wait = self.cap if requested is None else min(requested, self.cap)
        if self.deadline is not None:
            wait = min(wait, self.deadline - now)
        return max(wait, MIN_WAIT)


def operation_budget(
    ttl: float, now: float, timeout: float | None = None, until: float | None = None
) -> Budget:
    """The :class:`Budget` of an operation on a lease of ``ttl`` seconds started at ``now``:
    with a caller ``timeout``, it ends ``REPLY_GRACE`` after it; ``until``: a monotonic time it
    ends at anyway (a held lease's local deadline: an extend or release after it is useless)."""
    deadline = None if timeout is None else now + timeout + REPLY_GRACE
    if until is not None:
        deadline = until if deadline is None else min(deadline, until)
    return Budget(cap=ttl, deadline=deadline)


def within(timeout: float, now: float) -> Budget:
    """The :class:`Budget` of I/O given ``timeout`` seconds in all from ``now`` (a status read,
    a heartbeat): every request of it, connecting included, ends by then."""
    return Budget(cap=timeout, deadline=now + timeout)


def cleanup_budget(ttl: float, now: float) -> Budget:
    """The :class:`Budget` of the undo after a failed or interrupted acquire."""
    return Budget(cap=min(ttl, CLEANUP_GRACE), deadline=now + CLEANUP_GRACE)
