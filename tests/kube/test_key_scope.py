"""The Redis names of DistributedLock keys (pure): ``NAMESPACE#KEY``, collision-free, one hash
tag, and unscoped only where the Namespace's admin label says so."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redlease.core.keys import LockKeys, scoped_name, validate_name
from redlease.errors import ConfigError
from redlease.kube.names import SHARED_KEYS_LABEL
from redlease.kube.spec import key_scope, parse_spec
from redlease.sidecar.config import election_from_spec

NAMES = st.from_regex(r"[A-Za-z0-9._:/@+=-]{1,20}", fullmatch=True)
SCOPES = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
OPTIONAL_SCOPES = st.none() | SCOPES


@given(OPTIONAL_SCOPES, NAMES, OPTIONAL_SCOPES, NAMES)
def test_distinct_scope_and_key_never_share_a_redis_name(
    s1: str | None, k1: str, s2: str | None, k2: str
) -> None:
    if (s1, k1) != (s2, k2):
        assert scoped_name(s1, k1) != scoped_name(s2, k2)


@given(SCOPES, NAMES)
def test_a_scoped_name_is_one_hash_tag_and_a_valid_lock_name(scope: str, key: str) -> None:
    name = scoped_name(scope, key)
    assert name == f"{scope}#{key}" and validate_name(name) == name
    keys = LockKeys.for_name(name)
    assert all(k.startswith(f"redlease:{{{name}}}") for k in keys.all())  # one Cluster slot


def test_the_separator_is_refused_in_keys_and_bad_scopes() -> None:
    with pytest.raises(ConfigError, match=r"spec\.keys"):
        parse_spec({"keys": ["team-b#job"], "nodes": [{"url": "redis://r:6379"}]})
    with pytest.raises(ConfigError):
        scoped_name("team-a", "team-b#job")
    with pytest.raises(ConfigError, match="namespace"):
        scoped_name("Team_A", "job")
    with pytest.raises(ConfigError):
        validate_name("team-a#b#c")


def test_only_the_namespace_label_unscopes_keys() -> None:
    assert key_scope("team-a", None) == "team-a"
    assert key_scope("team-a", {SHARED_KEYS_LABEL: "false"}) == "team-a"
    assert key_scope("team-a", {SHARED_KEYS_LABEL: "true"}) is None
    spec = parse_spec({"keys": ["job", "other"], "nodes": [{"url": "redis://r:6379"}]})
    scoped = dataclasses.replace(spec, scope="team-a")
    assert scoped.keys == ("job", "other")  # what every surface shows
    assert scoped.redis_keys == ("team-a#job", "team-a#other")
    election = election_from_spec(scoped, "pod-0")
    assert (election.lock, election.redis_lock) == ("job", "team-a#job")
    assert election.redis_keys == scoped.redis_keys
    assert election_from_spec(spec, "pod-0").redis_keys == ("job", "other")
