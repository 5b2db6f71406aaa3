"""The operator's pure Lease decisions (:class:`Leadership`) on a fake clock."""

from __future__ import annotations

from redlease.core.timing import Timing
from redlease.kube.lease import LeaseRecord
from redlease.kube.leaselock import Leadership, LeaseElectionConfig

CONFIG = LeaseElectionConfig(
    "ns", "op", "me", Timing(ttl=15.0, renew_deadline=10.0, retry_period=2.0)
)


def test_takes_a_missing_lease() -> None:
    claim = Leadership(CONFIG).claim(None, 0.0, 1000.0)
    assert claim == LeaseRecord("me", 15, 1000.0, 1000.0, 0)


def test_waits_out_another_holder_on_its_own_clock() -> None:
    state = Leadership(CONFIG)
    other = LeaseRecord("other", 15, 1.0, 1.0, 3)
    assert state.claim(other, 100.0, 9999.0) is None  # wall times differ: only own clock counts
    assert state.claim(other, 114.9, 9999.0) is None
    claim = state.claim(other, 115.0, 2000.0)
    assert claim == LeaseRecord("me", 15, 2000.0, 2000.0, 4)


def test_a_renewal_by_the_holder_restarts_the_wait() -> None:
    state = Leadership(CONFIG)
    state.claim(LeaseRecord("other", 15, 1.0, 1.0, 0), 0.0, 0.0)
    assert state.claim(LeaseRecord("other", 15, 1.0, 5.0, 0), 10.0, 0.0) is None
    assert state.claim(LeaseRecord("other", 15, 1.0, 5.0, 0), 24.9, 0.0) is None


def test_renews_its_own_lease_keeping_acquire_time() -> None:
    mine = LeaseRecord("me", 15, 1.0, 1.0, 2)
    claim = Leadership(CONFIG).claim(mine, 0.0, 50.0)
    assert claim == LeaseRecord("me", 15, 1.0, 50.0, 2)


def test_a_released_lease_is_taken_at_once() -> None:
    released = LeaseRecord(None, 15, 1.0, 1.0, 5)
    assert Leadership(CONFIG).claim(released, 0.0, 9.0) == LeaseRecord("me", 15, 9.0, 9.0, 6)
