"""Pure logic: keys, reply decoding, timing math, renewal schedule, option validation."""

from __future__ import annotations

import pytest

from redlease import ConfigError, ProtocolError
from redlease.core import replies, scripts, timing
from redlease.core.handles import make_options
from redlease.core.keys import LockKeys
from redlease.core.term import Election
from redlease.core.timing import RenewSchedule


def test_all_keys_share_the_hash_tag() -> None:
    keys = LockKeys.for_name("jobs")
    assert all("{jobs}" in k for k in keys.all())
    assert len(set(keys.all())) == len(keys.all())


@pytest.mark.parametrize("bad", ["", "a{b", "a}b", "has space", "x" * 201, "tab\t"])
def test_bad_lock_names_are_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        LockKeys.for_name(bad)
    assert err.value.field == "lock"


def test_drift_and_deadline() -> None:
    assert timing.drift(10.0) == pytest.approx(0.102)
    assert timing.local_deadline(100.0, 10.0) == pytest.approx(109.898)


def test_decode_acquire_variants() -> None:
    granted = replies.decode_acquire([1, 7, 1, 1000, 3], "l")
    assert (granted.status, granted.fence, granted.count, granted.transitions) == (1, 7, 1, 3)
    held = replies.decode_acquire([0, 1500, b"pod-a"], "l")
    assert (held.status, held.wait_hint_ms, held.holder) == (0, 1500, "pod-a")
    reserved = replies.decode_acquire([3, 20, ""], "l")
    assert reserved.status == scripts.RESERVED and reserved.holder is None


@pytest.mark.parametrize("reply", [None, [], [9, 1], "x", [1, "nope", 1, 2]])
def test_bad_replies_raise_protocol_error_naming_the_lock(reply: object) -> None:
    with pytest.raises(ProtocolError) as err:
        replies.decode_acquire(reply, "mylock")
    assert err.value.lock == "mylock"


def test_renew_schedule_never_passes_the_deadline() -> None:
    s = RenewSchedule(ttl=9.0)
    election = Election(s.interval, s.retry)
    election.start(0.0, 8.8)
    assert election.next(1.0).at == 3.0
    assert election.failed(8.7, None).at == 8.8


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": -1}, "ttl"),
        ({"handoff": -1}, "handoff"),
        ({"replicas": -1}, "replicas"),
        ({"replica_timeout": 0}, "replica_timeout"),
        ({"identity": ""}, "identity"),
    ],
)
def test_option_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    base: dict[str, object] = {
        "ttl": 1.0,
        "identity": "me",
        "handoff": 0.1,
        "replicas": 0,
        "replica_timeout": 0.1,
    }
    base.update(kwargs)
    with pytest.raises(ConfigError) as err:
        make_options(**base)  # type: ignore[arg-type]
    assert err.value.field == field


def test_scripts_have_headers_and_distinct_shas() -> None:
    shas = {s.sha for s in scripts.ALL_SCRIPTS}
    assert len(shas) == len(scripts.ALL_SCRIPTS)
    for s in scripts.ALL_SCRIPTS:
        assert "KEYS[1]" in s.lua and "Returns" in s.lua, s.name
