"""The lock API's pure parts: request validation, the lease table, the answers; its flag."""

from __future__ import annotations

import json

import pytest

from redlease.cli import main, parse_args
from redlease.cli.login import Pod
from redlease.cli.sidecar import sidecar_config
from redlease.core.lease import Lease
from redlease.errors import LockContention, NotOwned
from redlease.sidecar import lockapi
from redlease.sidecar.lockapi import ApiError, Leases


def refused(call: object, *args: object) -> ApiError:
    with pytest.raises(ApiError) as info:
        call(*args)  # type: ignore[operator]
    return info.value


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_names_inside_the_prefix_only() -> None:
    assert lockapi.check_name("jobs/a", "jobs/") == "jobs/a"
    outside = refused(lockapi.check_name, "other", "jobs/")
    assert (outside.status, outside.body["field"]) == (403, "name")
    bad = refused(lockapi.check_name, "jobs/a b", "jobs/")
    assert (bad.status, bad.body["field"]) == (400, "name")
    scoped = refused(lockapi.check_name, "jobs/ns#a", "jobs/")  # '#' is the namespace's
    assert scoped.status == 400


def test_acquire_bodies() -> None:
    assert lockapi.parse_acquire(body({"ttl_ms": 5000})) == lockapi.AcquireRequest(5000, 0)
    assert lockapi.parse_acquire(body({"ttl_ms": 50, "wait_ms": lockapi.MAX_WAIT_MS})) == (
        lockapi.AcquireRequest(50, lockapi.MAX_WAIT_MS)
    )
    assert lockapi.parse_acquire(body({"ttl_ms": 86_400_000})).ttl_ms == 86_400_000


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
        (body({"ttl_ms": 1000, "wait_ms": lockapi.MAX_WAIT_MS + 1}), "wait_ms"),
        (body({"ttl_ms": 1000, "wait_ms": "1"}), "wait_ms"),
        (b"{", "body"),
        (b"\xff\xfe", "body"),
        (b'"x"', "body"),
        (b"[]", "body"),
    ],
)
def test_bad_acquire_bodies_name_the_field(raw: bytes, field: str) -> None:
    error = refused(lockapi.parse_acquire, raw)
    assert (error.status, error.body["field"]) == (400, field)


def test_extend_and_release_bodies() -> None:
    assert lockapi.parse_extend(body({"lease": "L"})) == lockapi.ExtendRequest("L", None)
    assert lockapi.parse_extend(body({"lease": "L", "ttl_ms": 900})).ttl_ms == 900
    assert lockapi.parse_release(body({"lease": "L"})) == "L"
    for raw in (b"{}", body({"lease": ""}), body({"lease": 3})):
        assert refused(lockapi.parse_release, raw).body["field"] == "lease"
    assert refused(lockapi.parse_extend, body({"lease": "L", "ttl_ms": 0})).body["field"] == (
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
    assert lockapi.granted("L", lease) == {"lease": "L", "fencing_token": 7, "expires_in_ms": 0}
    conflict = lockapi.held("jobs/a", LockContention("jobs/a", holder="pod-b"))
    assert (conflict.status, conflict.body["holder"]) == (409, "pod-b")
    gone = lockapi.lost("L", NotOwned("jobs/a", "not the owner"))
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
