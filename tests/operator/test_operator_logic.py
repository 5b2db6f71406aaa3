"""Pure reconcile logic: status from the lock view, change detection, events.

(The spec model and the lock view have their own tests: tests/chart/test_spec_table.py and
tests/core/test_view.py.)"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from redlease.core.state import Holder, LockState
from redlease.core.times import format_time
from redlease.core.view import lock_view
from redlease.errors import ConfigError
from redlease.kube.spec import parse_spec
from redlease.operator import reconcile

NODES3 = [{"url": f"redis://10.0.0.{i}:6379"} for i in (1, 2, 3)]


def spec(**over: Any) -> dict[str, Any]:
    return {"keys": ["job"], "nodes": [{"url": "redis://redis:6379/0"}], **over}


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


def status_for(
    obs_nodes: dict[str, Any], *, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    s = parse_spec(spec(nodes=NODES3))
    view = lock_view(["job"], dict(zip(s.node_names, obs_nodes.values(), strict=True)), 2)
    return reconcile.compute_status(
        s, view, read_at=1000.0, generation=3, previous=previous or {}, now=1000.0
    )


def test_phases() -> None:
    held = {"job": st("a", 4, 10_000)}
    free = {"job": st(None)}
    assert status_for({"1": held, "2": held, "3": held})["phase"] == "Held"
    assert status_for({"1": free, "2": free, "3": free})["phase"] == "Free"
    degraded = status_for({"1": held, "2": OSError("x"), "3": held})
    assert degraded["phase"] == "Degraded" and degraded["holder"] == "a"
    assert degraded["expiresAt"] == format_time(1010.0)
    gone = status_for({"1": held, "2": OSError("x"), "3": OSError("y")}, previous=degraded)
    # no quorum answered: the holder cannot be named (the view says why, in the condition)
    assert gone["phase"] == "Unavailable" and "holder" not in gone
    cond = {c["type"]: c for c in gone["conditions"]}["Held"]
    assert cond["status"] == "Unknown" and "only 1 of 3 nodes answered" in cond["message"]
    split = status_for({"1": held, "2": {"job": st(None)}, "3": OSError("y")})
    assert split["phase"] == "Degraded" and "holder" not in split


def test_change_detection_and_expiry_rule() -> None:
    held = {"job": st("a", 4, 10_000)}
    first = status_for({"1": held, "2": held, "3": held})
    assert reconcile.status_patch({}, first, now=1000.0, refresh=5.0) is not None
    assert reconcile.status_patch(first, first, now=1000.0, refresh=5.0) is None
    renewed = {**first, "expiresAt": format_time(1013.0)}
    # A renewal alone is not written while the stored expiry stays ahead of the next refresh...
    assert reconcile.status_patch(first, renewed, now=1001.0, refresh=5.0) is None
    # ...but is once the stored one would be stale before the next look.
    assert reconcile.status_patch(first, renewed, now=1006.0, refresh=5.0) is not None
    released = {k: v for k, v in first.items() if k not in ("holder", "fencingToken")}
    released["phase"] = "Free"
    patch = reconcile.status_patch(first, released, now=1000.0, refresh=5.0)
    assert patch is not None and patch["holder"] is None and patch["fencingToken"] is None


def test_semaphore_status_lists_every_agreed_holder() -> None:
    two = (Holder("a", 4, 10_000), Holder("b", 6, 12_000))
    node = {"job": st("a", 4, 10_000, fence=6, holders=two)}
    s = parse_spec(spec(nodes=NODES3, holders=2))
    # node 3 lists only b: both are still on a quorum of 2
    only_b = {"job": st("b", 6, 12_000, holders=two[1:])}
    answers = dict(zip(s.node_names, (node, node, only_b), strict=True))
    view = lock_view(["job"], answers, 2)
    status = reconcile.compute_status(
        s, view, read_at=1000.0, generation=1, previous={}, now=1000.0
    )
    assert status["holders"] == [
        {"holder": "a", "fencingToken": 4, "expiresAt": format_time(1010.0)},
        {"holder": "b", "fencingToken": 6, "expiresAt": format_time(1012.0)},
    ]
    assert (status["holder"], status["fencingToken"]) == ("a", 4)  # the view's (lowest slot)
    # a mutex's status has no list (unchanged), even when the view has its one holder
    mutex = reconcile.compute_status(
        parse_spec(spec(nodes=NODES3)), view, read_at=1000.0, generation=1, previous={}, now=1000.0
    )
    assert "holders" not in mutex

    # change detection: a holder's renewal alone waits, a new holder or token is written
    renewed = copy.deepcopy(status)
    renewed["holders"][1]["expiresAt"] = format_time(1014.0)
    assert reconcile.status_patch(status, renewed, now=1001.0, refresh=5.0) is None
    assert reconcile.status_patch(status, renewed, now=1008.0, refresh=5.0) is not None
    swapped = copy.deepcopy(status)
    swapped["holders"][1] = {"holder": "c", "fencingToken": 7, "expiresAt": format_time(1012.0)}
    assert reconcile.status_patch(status, swapped, now=1001.0, refresh=5.0) is not None
    fewer = {**status, "holders": status["holders"][:1]}
    assert reconcile.status_patch(status, fewer, now=1001.0, refresh=5.0) is not None


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

    from redlease.core import view as lockview
    from redlease.operator.refresher import Observation, Refresher

    batches: list[int] = []

    async def read(requests: Any) -> list[Observation]:
        batches.append(len(requests))
        return [(lockview.empty(["job"], 1, 1), 0.0) for _ in requests]

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

    from redlease.kube.auth import ClusterAuth
    from redlease.operator.config import OperatorConfig
    from redlease.operator.runtime import Runtime

    config = OperatorConfig(namespaces=("a",), kube=ClusterAuth("http://127.0.0.1:9"))
    with pytest.raises(kopf.PermanentError):
        Runtime(config).health()


async def test_concurrent_reads_of_one_namespace_share_one_request() -> None:
    import asyncio

    from redlease.devtools.kubeemulator import until
    from redlease.operator.secrets import SecretSource

    gets: list[str] = []
    answer = asyncio.Event()

    class Kube:
        async def request(self, method: str, path: str, **_: Any) -> Any:
            gets.append(path)
            await answer.wait()
            return {"metadata": {"labels": {}}}

    source = SecretSource(Kube(), ttl=0.0)  # type: ignore[arg-type]
    waiting = [asyncio.ensure_future(source.scope("apps")) for _ in range(100)]
    await until(lambda: bool(gets), timeout=10, what="the first GET")
    answer.set()
    scopes = await asyncio.gather(*waiting)
    assert gets == ["/api/v1/namespaces/apps"]
    assert set(scopes) == {"apps"}


async def test_patcher_bounds_orders_and_folds_patches() -> None:
    import asyncio

    from redlease.devtools.kubeemulator import until
    from redlease.errors import KubeError
    from redlease.operator.patcher import Patcher

    sent: list[tuple[str, dict[str, Any]]] = []
    in_flight = peak = 0
    gate = asyncio.Event()
    fail_once = {"/a"}

    async def send(path: str, patch: dict[str, Any]) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await gate.wait()
            if path in fail_once:
                fail_once.discard(path)
                raise KubeError("PATCH /a: no answer", None, "no answer")
            sent.append((path, patch))
        finally:
            in_flight -= 1

    patcher = Patcher(send, limit=4)
    try:
        patcher.submit("/a", {"status": {"holder": "x", "token": 1}})
        for i in range(20):
            patcher.submit(f"/o{i}", {"status": {"n": i}})
        await until(lambda: in_flight == 4, timeout=10, what="4 requests in flight")
        patcher.submit("/a", {"status": {"holder": None}})  # while /a is in flight
        assert peak == 4
        gate.set()
        await until(lambda: patcher.in_flight() == 0, timeout=10, what="every patch sent")
        assert peak == 4
        # the failed patch, retried with the newer one folded in: newest wins
        assert [p for path, p in sent if path == "/a"] == [{"status": {"holder": None, "token": 1}}]
        assert len(sent) == 21
    finally:
        await patcher.aclose()
