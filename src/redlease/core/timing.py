"""Lease timing: the TTL, the renew deadline and the retry period, and the rules between them;
the drift allowance and the local deadline of a granted lease.

Pure. client-go's leader election names the three timings and its ratios give the defaults;
every surface that takes them (the command-line flags, a DistributedLock's spec, the sidecar
and the operator's own election) checks them with :func:`validate_timing`, naming its own
fields. A lease, not Kubernetes: this is the core's. :func:`local_deadline` is when a holder
must stop trusting its lease (the flows, quorum validity, the sidecar).
"""

from __future__ import annotations

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
