"""The Lease record both writers use: its spec round trip, the released record, the CAS patch.

The writes themselves (create, swap, release against an API server) are exercised by the two
writers' own tests: tests/operator/test_operator_ha.py and tests/sidecar/test_mirror.py.
"""

from __future__ import annotations

from redlease.kube.lease import LeaseRecord, cas_patch, duration_seconds, new_lease

HELD = LeaseRecord("pod-a", 15, 1_767_323_045.5, 1_767_323_050.25, 3)


def test_the_spec_reads_back_as_the_same_record() -> None:
    lease = new_lease("ops", "lock", HELD, {"app": "x"})
    assert lease["spec"]["acquireTime"] == "2026-01-02T03:04:05.500000Z"  # a MicroTime
    assert LeaseRecord.of(lease) == HELD
    assert LeaseRecord.of({}) == LeaseRecord(duration=1)  # nothing there: zero values


def test_released_drops_the_holder_and_keeps_the_history() -> None:
    released = HELD.released(1_767_323_060.0)
    assert released == LeaseRecord(None, 1, HELD.acquire_time, 1_767_323_060.0, 3)
    assert released.spec()["holderIdentity"] is None


def test_the_patch_lands_only_on_the_version_read() -> None:
    test, replace = cas_patch("41", HELD)
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    assert replace == {"op": "add", "path": "/spec", "value": HELD.spec()}


def test_the_duration_never_undercuts_the_ttl() -> None:
    assert [duration_seconds(t) for t in (0.2, 1.0, 1.5, 15.0)] == [1, 1, 2, 15]
