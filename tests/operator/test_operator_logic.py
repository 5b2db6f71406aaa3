"""Pure reconcile logic: spec validation, quorum view, status, change detection, events."""

from __future__ import annotations

from typing import Any

import pytest

from redlease.core.state import LockState
from redlease.errors import ConfigError
from redlease.operator import reconcile
from redlease.operator.observe import combine, combine_key
from redlease.operator.spec import parse_spec

NODES3 = [{"url": f"redis://10.0.0.{i}:6379"} for i in (1, 2, 3)]


def spec(**over: Any) -> dict[str, Any]:
    return {"keys": ["job"], "nodes": [{"url": "redis://redis:6379/0"}], **over}


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"keys": []}, "spec.keys"),
        ({"keys": ["ok", "bad{brace}"]}, "spec.keys[1]"),
        ({"keys": ["a", "a"]}, "spec.keys"),
        ({"nodes": []}, "spec.nodes"),
        ({"nodes": [{"url": "http://x:1"}]}, "spec.nodes[0].url"),
        ({"nodes": [{"url": "redis://u:pw@x:1"}]}, "spec.nodes[0].url"),
        ({"nodes": NODES3[:2]}, "spec.nodes"),
        ({"ttlSeconds": 0}, "spec.ttlSeconds"),
        ({"ttlSeconds": "15"}, "spec.ttlSeconds"),
        ({"ttlSeconds": 10, "renewDeadlineSeconds": 10}, "spec.renewDeadlineSeconds"),
        ({"renewDeadlineSeconds": 5, "retryPeriodSeconds": 5}, "spec.retryPeriodSeconds"),
        ({"nodes": NODES3, "quorum": 4}, "spec.quorum"),
        ({"nodes": NODES3, "quorum": 1}, "spec.quorum"),
        ({"cluster": True, "quorum": 1}, "spec.quorum"),
        ({"auth": {"secretRef": {"name": "Bad_Name"}}}, "spec.auth.secretRef.name"),
        ({"paused": "yes"}, "spec.paused"),
    ],
)
def test_invalid_specs_name_the_field(override: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(spec(**override))
    assert info.value.field == field
    assert "pw" not in str(info.value)


def test_valid_spec_defaults() -> None:
    s = parse_spec(spec(nodes=NODES3))
    assert (s.ttl_seconds, s.renew_deadline_seconds, s.retry_period_seconds) == (15, 10, 2)
    assert s.quorum == 2 and s.total_nodes == 3
    assert s.node_names == ("10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379")
    c = parse_spec(spec(nodes=NODES3[:2], cluster=True))
    assert c.quorum == 1 and c.total_nodes == 1 and c.node_names[0].startswith("cluster ")


def st(
    holder: str | None, token: int | None = None, ttl: int | None = None, **kw: Any
) -> LockState:
    return LockState(
        name="job",
        now_ms=0,
        holder=holder,
        fencing_token=token,
        expires_in_ms=ttl,
        last_fence=kw.pop("fence", token or 0),
        **kw,
    )


def test_quorum_view() -> None:
    view = combine_key("job", [st("a", 7, 9000), st("a", 8, 5000), st("b", 9, 8000)], 2)
    assert (view.holder, view.fencing_token, view.expires_in_ms) == ("a", 8, 5000)
    assert view.last_fence == 9
    split = combine_key("job", [st("a", 1, 10), st("b", 2, 10), st(None)], 2)
    assert split.holder is None and split.fencing_token is None
    five = [st("a", 3, t) for t in (100, 500, 300, 400)] + [st(None)]
    assert combine_key("job", five, 3).expires_in_ms == 300  # 3rd largest


def test_combine_health() -> None:
    answers = {"job": st("a", 1, 1000)}
    obs = combine(["job"], {"n1": answers, "n2": OSError("refused"), "n3": answers}, 2, 0.0)
    assert obs.reachable and obs.unhealthy == ("n2",) and obs.primary is not None
    assert obs.primary.holder == "a" and obs.errors["n2"] == "refused"
    down = combine(["job"], {"n1": answers, "n2": OSError(), "n3": OSError()}, 2, 0.0)
    assert not down.reachable and down.keys == ()


def status_for(
    obs_nodes: dict[str, Any], *, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    s = parse_spec(spec(nodes=NODES3))
    obs = combine(["job"], dict(zip(s.node_names, obs_nodes.values(), strict=True)), 2, 1000.0)
    return reconcile.compute_status(s, obs, generation=3, previous=previous or {}, now=1000.0)


def test_phases() -> None:
    held = {"job": st("a", 4, 10_000)}
    free = {"job": st(None)}
    assert status_for({"1": held, "2": held, "3": held})["phase"] == "Held"
    assert status_for({"1": free, "2": free, "3": free})["phase"] == "Free"
    degraded = status_for({"1": held, "2": OSError("x"), "3": held})
    assert degraded["phase"] == "Degraded" and degraded["holder"] == "a"
    assert degraded["expiresAt"] == reconcile.timestamp(1010.0)
    gone = status_for({"1": held, "2": OSError("x"), "3": OSError("y")}, previous=degraded)
    assert gone["phase"] == "Unavailable" and gone["holder"] == "a"  # last known, kept


def test_change_detection_and_expiry_rule() -> None:
    held = {"job": st("a", 4, 10_000)}
    first = status_for({"1": held, "2": held, "3": held})
    assert reconcile.status_patch({}, first, now=1000.0, refresh=5.0) is not None
    assert reconcile.status_patch(first, first, now=1000.0, refresh=5.0) is None
    renewed = {**first, "expiresAt": reconcile.timestamp(1013.0)}
    # A renewal alone is not written while the stored expiry stays ahead of the next refresh...
    assert reconcile.status_patch(first, renewed, now=1001.0, refresh=5.0) is None
    # ...but is once the stored one would be stale before the next look.
    assert reconcile.status_patch(first, renewed, now=1006.0, refresh=5.0) is not None
    released = {k: v for k, v in first.items() if k not in ("holder", "fencingToken")}
    released["phase"] = "Free"
    patch = reconcile.status_patch(first, released, now=1000.0, refresh=5.0)
    assert patch is not None and patch["holder"] is None and patch["fencingToken"] is None


def test_events() -> None:
    held = {"job": st("a", 4, 10_000)}
    before = status_for({"1": held, "2": held, "3": held})
    after = status_for({"1": held, "2": OSError("x"), "3": held}, previous=before)
    evs = reconcile.decide_events(before, after)
    assert [(e.type, e.reason) for e in evs] == [("Warning", "NodeLost")]
    assert "10.0.0.2:6379" in evs[0].message
    back = reconcile.decide_events(after, before)
    assert [e.reason for e in back] == ["NodeRecovered"]
    other = status_for({"1": {"job": st("b", 5, 9000)}, "2": held, "3": {"job": st("b", 5, 9000)}})
    evs = reconcile.decide_events(before, other)
    assert [e.reason for e in evs] == ["HolderChanged"] and "was a" in evs[0].message
    err = ConfigError("spec.keys", "bad")
    invalid = reconcile.invalid_status(err, generation=1, previous=before, now=1.0)
    assert [e.reason for e in reconcile.decide_events(before, invalid, err)] == ["InvalidSpec"]
    assert reconcile.decide_events(invalid, invalid, err) == []


async def test_refresher_batches_one_read_per_cycle() -> None:
    import asyncio

    from redlease.operator.observe import Observation
    from redlease.operator.refresher import Refresher

    batches: list[int] = []

    async def read(requests: Any) -> list[Observation]:
        batches.append(len(requests))
        return [Observation((), ("n",), (), 1, 0.0) for _ in requests]

    refresher = Refresher(read, interval=0.2)
    task = asyncio.ensure_future(refresher.run())
    try:
        s = parse_spec(spec())
        results = await asyncio.gather(*(refresher.observe(s) for _ in range(50)))
        assert len(results) == 50 and batches == [50]
        assert not refresher.stale()
    finally:
        task.cancel()


def test_health_fails_without_refresh_loop() -> None:
    import kopf

    from redlease.operator.handlers import OperatorConfig, Runtime

    with pytest.raises(kopf.PermanentError):
        Runtime(OperatorConfig(namespaces=("a",))).health()
