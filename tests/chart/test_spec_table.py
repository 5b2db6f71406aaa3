"""One spec, one verdict: each example goes through the CRD (schema, list types, CEL rules with
cel-python) and through the parser every component uses (:func:`redlease.kube.spec.parse_spec`);
both must accept it, or both refuse it (and the parser must name the field)."""

from __future__ import annotations

from typing import Any

import pytest

from redlease.core.rules import MAX_HOLDERS
from redlease.devtools.manifests import api_server_accepts, lock_object, version_schema
from redlease.errors import ConfigError
from redlease.kube.fields import OBJECT_FIELDS, Fields
from redlease.kube.spec import parse_spec

ONE = [{"url": "redis://redis:6379/0"}]
THREE = [{"url": f"redis://r{i}:6379/0"} for i in range(3)]
TLS = [{"url": "rediss://redis:6380/0"}]


def spec(**over: Any) -> dict[str, Any]:
    return {"keys": ["job"], "nodes": ONE, **over}


OK = None
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("minimal", spec(), OK),
    ("redlock-3", spec(nodes=THREE), OK),
    ("redlock-quorum-3", spec(nodes=THREE, quorum=3), OK),
    ("redlock-strict-restart", spec(nodes=THREE, strictRestart=True), OK),
    ("strict-restart-off-one-node", spec(strictRestart=False), OK),
    ("redlock-5", spec(nodes=[{"url": f"redis://r{i}:6379"} for i in range(5)], quorum=3), OK),
    ("cluster-seeds", spec(nodes=THREE[:2], cluster=True), OK),
    ("sentinel", spec(nodes=[{"url": "redis+sentinel://s1:26379,s2:26379/mymaster"}]), OK),
    ("unix", spec(nodes=[{"url": "unix:///run/redis.sock"}]), OK),
    ("tls", spec(nodes=[{"url": "rediss://r:6380/0"}], tls={"insecureSkipVerify": True}), OK),
    ("auth", spec(auth={"secretRef": {"name": "redis-pw", "passwordKey": "pw"}}), OK),
    ("tls-ca", spec(nodes=TLS, tls={"caSecretRef": {"name": "redis-ca"}}), OK),
    (
        "tls-mtls",
        spec(
            nodes=[*TLS, *THREE[:2]],
            tls={
                "caSecretRef": {"name": "redis-ca", "key": "ca.pem"},
                "clientCertSecretRef": {"name": "client", "certKey": "c.pem", "keyKey": "k.pem"},
            },
        ),
        OK,
    ),
    ("tls-client-only", spec(nodes=TLS, tls={"clientCertSecretRef": {"name": "client"}}), OK),
    ("multi-key", spec(keys=["orders", "billing"]), OK),
    ("holders", spec(holders=3), OK),
    ("holders-max", spec(holders=64), OK),
    ("holders-one-over-two-keys", spec(keys=["a", "b"], holders=1), OK),
    ("ttl-only", spec(ttlSeconds=5), OK),
    ("retry-below-derived-deadline", spec(ttlSeconds=4, retryPeriodSeconds=2), OK),
    ("full-timing", spec(ttlSeconds=30, renewDeadlineSeconds=20, retryPeriodSeconds=4), OK),
    ("preferred", spec(preferredHolder="pod-0", paused=True), OK),
    ("replicas", spec(nodes=[{"url": "redis+sentinel://s1:26379/m"}], replicas=1), OK),
    ("replicas-zero", spec(replicas=0), OK),
    ("replicas-max", spec(nodes=THREE, replicas=15), OK),
    ("no-keys", spec(keys=[]), "spec.keys"),
    ("duplicate-keys", spec(keys=["a", "a"]), "spec.keys"),
    ("brace-in-key", spec(keys=["ok", "bad{brace}"]), "spec.keys[1]"),
    ("newline-in-key", spec(keys=["job\n"]), "spec.keys[0]"),
    ("scope-separator-in-key", spec(keys=["team-b#job"]), "spec.keys[0]"),
    ("too-many-keys", spec(keys=[f"k{i}" for i in range(17)]), "spec.keys"),
    ("no-nodes", spec(nodes=[]), "spec.nodes"),
    ("missing-nodes", {"keys": ["job"]}, "spec.nodes"),
    ("two-nodes", spec(nodes=THREE[:2]), "spec.nodes"),
    ("http-url", spec(nodes=[{"url": "http://x:1"}]), "spec.nodes[0].url"),
    ("userinfo", spec(nodes=[{"url": "redis://u:pw@x:1"}]), "spec.nodes[0].url"),
    ("query-password", spec(nodes=[{"url": "redis://x:1/0?password=pw"}]), "spec.nodes[0].url"),
    ("duplicate-nodes", spec(nodes=[*THREE[:2], THREE[0]]), "spec.nodes"),
    ("ttl-zero", spec(ttlSeconds=0), "spec.ttlSeconds"),
    ("ttl-string", spec(ttlSeconds="15"), "spec.ttlSeconds"),
    ("ttl-too-long", spec(ttlSeconds=86401), "spec.ttlSeconds"),
    ("holders-zero", spec(holders=0), "spec.holders"),
    ("holders-string", spec(holders="2"), "spec.holders"),
    ("holders-word", spec(holders="two"), "spec.holders"),
    ("holders-too-many", spec(holders=65), "spec.holders"),
    ("holders-over-two-keys", spec(keys=["a", "b"], holders=2), "spec.holders"),
    (
        "deadline-not-below-ttl",
        spec(ttlSeconds=10, renewDeadlineSeconds=10),
        "spec.renewDeadlineSeconds",
    ),
    (
        "retry-not-below-deadline",
        spec(renewDeadlineSeconds=5, retryPeriodSeconds=5),
        "spec.retryPeriodSeconds",
    ),
    (
        "retry-not-below-derived-deadline",
        spec(ttlSeconds=3, retryPeriodSeconds=2),
        "spec.retryPeriodSeconds",
    ),
    ("quorum-above-nodes", spec(nodes=THREE, quorum=4), "spec.quorum"),
    ("quorum-minority", spec(nodes=THREE, quorum=1), "spec.quorum"),
    ("quorum-on-cluster", spec(cluster=True, quorum=1), "spec.quorum"),
    ("strict-restart-one-node", spec(strictRestart=True), "spec.strictRestart"),
    (
        "strict-restart-cluster",
        spec(nodes=THREE, cluster=True, strictRestart=True),
        "spec.strictRestart",
    ),
    ("strict-restart-string", spec(nodes=THREE, strictRestart="true"), "spec.strictRestart"),
    (
        "cluster-via-sentinel",
        spec(nodes=[{"url": "redis+sentinel://s:26379/m"}], cluster=True),
        "spec.nodes",
    ),
    ("secret-name", spec(auth={"secretRef": {"name": "Bad_Name"}}), "spec.auth.secretRef.name"),
    (
        "secret-key",
        spec(auth={"secretRef": {"name": "s", "passwordKey": "a b"}}),
        "spec.auth.secretRef.passwordKey",
    ),
    ("auth-without-ref", spec(auth={}), "spec.auth.secretRef"),
    ("paused-string", spec(paused="yes"), "spec.paused"),
    ("tls-string", spec(tls={"insecureSkipVerify": "no"}), "spec.tls.insecureSkipVerify"),
    (
        "tls-skip-and-ca",
        spec(nodes=TLS, tls={"insecureSkipVerify": True, "caSecretRef": {"name": "ca"}}),
        "spec.tls.insecureSkipVerify",
    ),
    ("tls-ca-without-tls-node", spec(tls={"caSecretRef": {"name": "ca"}}), "spec.tls"),
    ("tls-ca-no-name", spec(nodes=TLS, tls={"caSecretRef": {}}), "spec.tls.caSecretRef.name"),
    (
        "tls-ca-bad-name",
        spec(nodes=TLS, tls={"caSecretRef": {"name": "Redis_CA"}}),
        "spec.tls.caSecretRef.name",
    ),
    (
        "tls-ca-bad-key",
        spec(nodes=TLS, tls={"caSecretRef": {"name": "ca", "key": "ca/crt"}}),
        "spec.tls.caSecretRef.key",
    ),
    (
        "tls-client-bad-key",
        spec(nodes=TLS, tls={"clientCertSecretRef": {"name": "c", "keyKey": "k k"}}),
        "spec.tls.clientCertSecretRef.keyKey",
    ),
    ("preferred-space", spec(preferredHolder="pod 0"), "spec.preferredHolder"),
    ("replicas-negative", spec(replicas=-1), "spec.replicas"),
    ("replicas-too-many", spec(replicas=16), "spec.replicas"),
    ("replicas-string", spec(replicas="1"), "spec.replicas"),
    ("replicas-bool", spec(replicas=True), "spec.replicas"),
]


@pytest.mark.parametrize(("name", "body", "field"), CASES, ids=[c[0] for c in CASES])
def test_crd_and_parser_agree(name: str, body: dict[str, Any], field: str | None) -> None:
    accepted, why = api_server_accepts(lock_object(body))
    try:
        parse_spec(body)
        parsed, error = True, None
    except ConfigError as exc:
        parsed, error = False, exc
    assert accepted == (field is None), f"{name}: API server verdict {accepted} ({why})"
    assert parsed == (field is None), f"{name}: parser verdict {parsed} ({error})"
    if error is not None:
        assert error.field == field
        assert "pw" not in str(error)  # no credential in any message


def test_parser_defaults_follow_client_go_ratios() -> None:
    s = parse_spec(spec(nodes=THREE))
    assert (s.timing.ttl, s.timing.renew_deadline, s.timing.retry_period) == (15, 10, 2)
    assert s.quorum == 2 and s.total_nodes == 3
    assert not s.target.strict_restart
    assert parse_spec(spec(nodes=THREE, strictRestart=True)).target.strict_restart
    assert s.node_names == ("r0:6379", "r1:6379", "r2:6379")
    c = parse_spec(spec(nodes=THREE[:2], cluster=True))
    assert c.quorum == 1 and c.total_nodes == 1 and c.node_names[0].startswith("cluster ")


def test_parser_also_refuses_the_same_node_written_twice() -> None:
    # CEL compares URL strings; the parser compares nodes (host:port), a stricter check.
    with pytest.raises(ConfigError) as info:
        parse_spec(spec(nodes=[{"url": "redis://r:6379"}, {"url": "redis://r:6379/0"}, THREE[1]]))
    assert info.value.field == "spec.nodes"


def test_holders_bound_is_the_cores() -> None:
    """``spec.holders`` allows exactly what a ``Semaphore`` allows (redlease.MAX_HOLDERS), and
    ``status.holders`` has room for that many."""
    schema = version_schema()["properties"]
    holders = schema["spec"]["properties"]["holders"]
    assert (holders["minimum"], holders["maximum"], holders["default"]) == (1, MAX_HOLDERS, 1)
    assert schema["status"]["properties"]["holders"]["maxItems"] == MAX_HOLDERS
    assert parse_spec(spec()).holders == 1
    assert parse_spec(spec(holders=MAX_HOLDERS)).holders == MAX_HOLDERS


def _declared(schema: dict[str, Any]) -> Fields | list[Fields] | None:
    """The field tree of a schema node, in the shape of :data:`redlease.kube.fields.SPEC_FIELDS`."""
    if schema.get("type") == "array" and (schema.get("items") or {}).get("properties"):
        return [_declared(schema["items"])]  # type: ignore[list-item]
    if schema.get("properties"):
        return {name: _declared(child) for name, child in schema["properties"].items()}
    return None


def test_unknown_fields_know_what_the_crd_declares() -> None:
    """One set of field names: :func:`unknown_fields` knows exactly the CRD's (status and
    metadata are not checked: the operator writes one, the API server owns the other)."""
    declared = _declared(version_schema())
    assert isinstance(declared, dict)
    assert {**declared, "status": None, "metadata": None} == OBJECT_FIELDS
