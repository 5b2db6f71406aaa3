"""The elector state machine on a fake clock (``now`` passed in), client-go style."""

from __future__ import annotations

from redlease.core.lease import Lease, RenewLoop
from redlease.core.term import DEADLINE_PASSED, Action, Election, classify
from redlease.errors import ClockStepped, LockError, LockUnavailable, NotOwned, ProtocolError


def leader(sent_at: float = 0.0) -> Election:
    """A term won by an attempt sent at ``sent_at``: renew every 2, retry every 1, deadline
    10 after the send."""
    e = Election(renew_every=2.0, retry_every=1.0, renew_deadline=10.0)
    assert e.next(sent_at).action is Action.ACQUIRE
    assert e.succeeded(sent_at, sent_at + 0.5)
    return e


def test_renews_at_the_period_after_the_send() -> None:
    e = leader(0.0)
    step = e.next(0.5)
    assert (step.action, step.at) == (Action.RENEW, 2.0)
    assert e.succeeded(2.0, 3.0)
    assert e.next(3.0).at == 4.0


def test_deadline_runs_from_send_time_minus_drift() -> None:
    e = Election(renew_every=5.0, retry_every=1.0)
    # the lease's local deadline (send + ttl - drift) is the only bound without renew_deadline
    assert e.succeeded(100.0, 100.9, lease_deadline=100.0 + 15.0 - 0.2)
    assert e.deadline == 114.8
    assert e.leading(114.79) and not e.leading(114.8)
    f = leader(7.0)
    assert f.deadline == 17.0  # from the send, not from the answer at 7.5


def test_late_success_after_deadline_does_not_resurrect() -> None:
    e = leader(0.0)
    assert e.budget(9.0) == 1.0
    assert not e.succeeded(9.0, 10.5)
    assert not e.leading(10.5)
    step = e.next(10.5)
    assert (step.action, step.reason) == (Action.LOST, DEADLINE_PASSED)
    assert e.budget(10.5) is None


def test_grant_void_on_arrival_is_not_a_term() -> None:
    e = Election(renew_every=2.0, retry_every=1.0, renew_deadline=10.0)
    assert not e.succeeded(0.0, 11.0)
    assert e.next(11.0).action is Action.ACQUIRE


def test_not_owned_means_lost() -> None:
    e = leader()
    step = e.failed(3.0, classify(NotOwned("x", "gone")))
    assert step.action is Action.LOST
    assert "taken over" in step.reason
    assert not e.leading(3.0)


def test_clock_step_is_lost_with_its_reason() -> None:
    e = leader()
    err = ClockStepped("x", "server clock stepped back 5s")
    step = e.failed(3.0, classify(err))
    assert (step.action, step.reason) == (Action.LOST, err.message)


def test_transient_error_retries_until_the_deadline_then_lost() -> None:
    e = leader(0.0)
    now = 2.0
    while True:
        step = e.failed(now, classify(LockUnavailable("x", "down")))
        if step.action is Action.LOST:
            break
        assert step.action is Action.RENEW and step.at == min(now + 1.0, 10.0)
        assert e.leading(now)
        now = step.at
    assert now == 10.0 and step.reason == DEADLINE_PASSED
    assert classify(TimeoutError()) is None


def test_first_reason_stays_and_reset_runs_again() -> None:
    e = leader()
    e.failed(1.0, "refused")
    e.lose("later")
    assert e.next(2.0).reason == "refused"
    assert not e.succeeded(2.0, 2.1)  # a success after the loss changes nothing
    e.reset()
    assert e.next(2.0).action is Action.ACQUIRE


def test_acquire_retries_at_the_retry_period() -> None:
    e = Election(renew_every=2.0, retry_every=1.0, renew_deadline=10.0)
    step = e.failed(0.0, None)
    assert (step.action, step.at) == (Action.ACQUIRE, 1.0)
    assert e.budget(1.0) == 1.0


def test_a_failure_reported_at_its_send_time_is_retried_a_period_after_the_send() -> None:
    e = leader(0.0)
    step = e.failed(2.0, None)  # the attempt sent at 2.0 failed late (at 3.5, say)
    assert (step.action, step.at) == (Action.RENEW, 3.0)
    assert e.next(3.5).at == 3.5  # due already: retried at once
    assert e.succeeded(3.5, 3.6)
    assert e.next(3.6).at == 5.5  # a success: renew_every after its send


def test_new_periods_apply_to_the_next_attempt_and_the_deadline_to_the_next_success() -> None:
    e = leader(0.0)
    e.retime(renew_every=4.0, retry_every=0.5, renew_deadline=6.0)
    assert e.next(0.5).at == 4.0  # from the last send, with the new period
    assert e.deadline == 10.0  # the running term keeps its deadline
    assert e.failed(4.0, None).at == 4.5
    assert e.succeeded(4.5, 4.6) and e.deadline == 10.5


def test_one_rule_only_a_refusal_ends_a_term_at_once() -> None:
    """NotOwned (and its ClockStepped) end the term at once; any other error -- an outage, a
    timeout, a reply not understood, an error from a client library -- is retried until the
    local deadline (client-go's rule), by every renewer (they all classify with this)."""
    assert classify(NotOwned("x", "gone")) is not None
    assert classify(ClockStepped("x", "stepped")) is not None
    for exc in (
        LockUnavailable("x", "down"),
        TimeoutError(),
        ProtocolError("x", "unexpected reply"),
        LockError("x", "anything else"),
        ConnectionResetError(),
        RuntimeError("a client library bug"),
    ):
        e = leader(0.0)
        step = e.failed(3.0, classify(exc))
        assert step.action is Action.RENEW and e.leading(3.0), exc


def test_the_library_renewer_follows_the_one_rule() -> None:
    """The renewer's loop (core/lease.py) retries a reply it does not understand until the
    lease's local deadline, and loses it at once on a refusal."""
    now = [0.0]
    lease = Lease("x", fencing_token=1, ttl=3.0, deadline=3.0, acquired_at_ms=0)
    loop = RenewLoop("x", lease, 1 / 3, clock=lambda: now[0])
    now[0] = 1.0
    budget = loop.begin()
    assert loop.end(budget, ProtocolError("x", "unexpected reply")) is None
    assert loop.end(loop.begin(), RuntimeError("client bug")) is None
    now[0] = 2.0
    assert loop.end(loop.begin(), NotOwned("x", "gone")) is not None
