"""The lock API's pure parts: request validation, the lease table, the answers; its flag."""

from __future__ import annotations

import json
import time

import pytest

from redlease.cli import main, parse_args
from redlease.cli.login import Pod
from redlease.cli.sidecar import sidecar_config
from redlease.core.lease import Lease
from redlease.errors import ConfigError, LockContention, NotOwned
from redlease.sidecar import lockanswers, locktarget
from redlease.sidecar.leasetable import Leases
from redlease.sidecar.lockanswers import ApiError


def refused(call: object, *args: object) -> ApiError:
    with pytest.raises(ApiError) as info:
        call(*args)  # type: ignore[operator]
    return info.value


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_names_inside_the_prefix_only() -> None:
    assert lockanswers.check_name("jobs/a", "jobs/") == "jobs/a"
    outside = refused(lockanswers.check_name, "other", "jobs/")
    assert (outside.status, outside.body["field"]) == (403, "name")
    bad = refused(lockanswers.check_name, "jobs/a b", "jobs/")
    assert (bad.status, bad.body["field"]) == (400, "name")
    scoped = refused(lockanswers.check_name, "jobs/ns#a", "jobs/")  # '#' is the namespace's
    assert scoped.status == 400


def test_acquire_bodies() -> None:
    assert lockanswers.parse_acquire(body({"ttl_ms": 5000})) == lockanswers.AcquireRequest(5000, 0)
    assert lockanswers.parse_acquire(body({"ttl_ms": 50, "wait_ms": lockanswers.MAX_WAIT_MS})) == (
        lockanswers.AcquireRequest(50, lockanswers.MAX_WAIT_MS)
    )
    assert lockanswers.parse_acquire(body({"ttl_ms": 86_400_000})).ttl_ms == 86_400_000


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"", "ttl_ms"),
        (b"{}", "ttl_ms"),
        (body({"ttl_ms": None}), "ttl_ms"),
        (body({"ttl_ms": 1.5}), "ttl_ms"),
        (body({"ttl_ms": True}), "ttl_ms"),
        (body({"ttl_ms": 49}), "ttl_ms"),
        (body({"ttl_ms": 86_400_001}), "ttl_ms"),
        (body({"ttl_ms": 1000, "wait_ms": -1}), "wait_ms"),
        (body({"ttl_ms": 1000, "wait_ms": lockanswers.MAX_WAIT_MS + 1}), "wait_ms"),
        (body({"ttl_ms": 1000, "wait_ms": "1"}), "wait_ms"),
        (b"{", "body"),
        (b"\xff\xfe", "body"),
        (b'"x"', "body"),
        (b"[]", "body"),
    ],
)
def test_bad_acquire_bodies_name_the_field(raw: bytes, field: str) -> None:
    error = refused(lockanswers.parse_acquire, raw)
    assert (error.status, error.body["field"]) == (400, field)


def test_extend_and_release_bodies() -> None:
    assert lockanswers.parse_extend(body({"lease": "L"})) == lockanswers.ExtendRequest("L", None)
    assert lockanswers.parse_extend(body({"lease": "L", "ttl_ms": 900})).ttl_ms == 900
    assert lockanswers.parse_release(body({"lease": "L"})) == "L"
    for raw in (b"{}", body({"lease": ""}), body({"lease": 3})):
        assert refused(lockanswers.parse_release, raw).body["field"] == "lease"
    assert refused(lockanswers.parse_extend, body({"lease": "L", "ttl_ms": 0})).body["field"] == (
        "ttl_ms"
    )


def test_lease_ids_are_random_and_bound_to_their_name() -> None:
    table = Leases(limit=2)
    first, second = table.add("jobs/a", object()), table.add("jobs/a", object())
    assert first != second and len(first) >= 24
    assert table.get(first, "jobs/a").name == "jobs/a"
    other = refused(table.get, first, "jobs/b")
    assert (other.status, other.body["field"]) == (404, "lease")
    assert refused(table.room).status == 429
    table.remove(first)
    assert refused(table.get, first, "jobs/a").status == 404
    table.room()
    assert [e.name for e in table.drain()] == ["jobs/a"] and len(table) == 0


def test_answers() -> None:
    lease = Lease("jobs/a", fencing_token=7, ttl=10.0, deadline=0.0, acquired_at_ms=0)
    assert lockanswers.granted("L", lease) == {"lease": "L", "fencing_token": 7, "expires_in_ms": 0}
    conflict = lockanswers.held("jobs/a", LockContention("jobs/a", holder="pod-b"))
    assert (conflict.status, conflict.body["holder"]) == (409, "pod-b")
    gone = lockanswers.lost("L", NotOwned("jobs/a", "not the owner"))
    assert (gone.status, gone.body["field"]) == (410, "lease")


def test_the_flag_and_its_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["sidecar", "--lock", "x", "--redis", "redis://127.0.0.1:1/0", "--http", "off"]
    assert sidecar_config(parse_args(base), Pod(None, None)).api_locks is None
    given = sidecar_config(parse_args([*base, "--api-locks", "jobs/"]), Pod(None, None))
    assert given.api_locks == "jobs/"
    monkeypatch.setenv("REDLEASE_API_LOCKS", "batch-")
    assert sidecar_config(parse_args(base), Pod(None, None)).api_locks == "batch-"
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert main([*base, "--api-locks", "a{b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--api-locks" in err, err


def _lease(deadline: float) -> Lease:
    return Lease("jobs/a", fencing_token=1, ttl=1.0, deadline=deadline, acquired_at_ms=0)


def test_the_table_forgets_a_lease_at_its_local_deadline() -> None:
    now = [100.0]
    table = Leases(limit=2, clock=lambda: now[0])
    short = table.add("jobs/a", object(), _lease(101.0))
    kept = table.add("jobs/b", object(), _lease(101.0))
    assert refused(table.room).status == 429
    table.get(kept, "jobs/b").lease.deadline = 105.0  # type: ignore[union-attr] # an extend
    now[0] = 101.5
    assert len(table) == 1
    table.room()  # a place again
    expired = refused(table.get, short, "jobs/a")  # forgotten, and said so
    assert (expired.status, expired.body["field"]) == (410, "lease")
    assert refused(table.get, short, "jobs/b").status == 404  # still bound to its name
    assert table.get(kept, "jobs/b").name == "jobs/b"
    now[0] = 106.0
    assert len(table) == 0


def test_reservations_count_against_the_limit() -> None:
    table = Leases(limit=2)
    table.reserve()
    table.reserve()
    assert refused(table.reserve).status == 429  # two acquires in flight fill it
    table.unreserve()  # one failed
    table.add("jobs/a", object(), _lease(time.monotonic() + 60))  # the other was granted
    table.reserve()  # the failed one's place
    assert refused(table.reserve).status == 429  # the limit is exact
    assert (len(table), table.reserved) == (1, 1)


def test_deeply_nested_json_is_a_400_naming_the_body() -> None:
    for raw in (b"[" * 4000, b'{"a":' * 2000):
        error = refused(lockanswers.parse_acquire, raw)
        assert (error.status, error.body["field"]) == (400, "body")


def test_the_prefix_must_not_cover_the_sidecars_own_lock(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["sidecar", "--redis", "redis://127.0.0.1:1/0", "--http", "off"]
    with pytest.raises(ConfigError) as info:
        sidecar_config(parse_args([*base, "--lock", "jobs/leader", "--api-locks", "jobs/"]),
                       Pod(None, None))  # fmt: skip
    assert info.value.field == "--api-locks" and "jobs/leader" in str(info.value)
    ok = parse_args([*base, "--lock", "leader", "--api-locks", "jobs/"])
    assert sidecar_config(ok, Pod(None, None)).api_locks == "jobs/"
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert main([*base, "--lock", "jobs-main", "--api-locks", "jobs"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--api-locks" in err and "jobs-main" in err, err


def test_waits_and_pool_follow_the_port() -> None:
    assert locktarget.lock_waits(256) == 96  # of 128 parked requests: 32 stay for long-polls
    assert locktarget.pool_size(256) > locktarget.lock_waits(256) + 4  # + the short requests' gate
    assert locktarget.pool_size() >= locktarget.pool_size(64)
