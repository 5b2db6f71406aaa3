"""The lock view (pure): the one quorum rule every surface renders."""

from __future__ import annotations

from typing import Any

from redlease.core import view as lockview
from redlease.core.observe import Notices
from redlease.core.restart import OPERATOR, REJOINING, Probe
from redlease.core.state import Holder, LockState
from redlease.core.view import lock_view


def st(
    holder: str | None = None, token: int | None = None, ttl: int | None = None, **kw: Any
) -> LockState:
    held = holder is not None
    return LockState(
        name=kw.pop("name", "job"),
        now_ms=0,
        holder=holder,
        fencing_token=token if held else None,
        expires_in_ms=ttl if held else None,
        last_fence=kw.pop("fence", token or 0),
        **kw,
    )


def nodes(*answers: Any, key: str = "job") -> dict[str, Any]:
    return {f"n{i}": a if isinstance(a, BaseException) else {key: a} for i, a in enumerate(answers)}


def test_single_node_is_its_own_quorum() -> None:
    held = lock_view(["job"], nodes(st("a", 4, 900)), 1)
    assert (held.holder, held.fencing_token, held.expires_in_ms, held.unknown) == (
        "a",
        4,
        900,
        None,
    )
    assert held.nodes.as_dict() == {"total": 1, "healthy": 1, "quorum": 1}
    free = lock_view(["job"], nodes(st()), 1)
    assert free.holder is None and free.unknown is None and not free.held


def test_a_holder_needs_a_quorum_agreeing_on_the_same_lease() -> None:
    v = lock_view(["job"], nodes(st("a", 8, 9000), st("a", 8, 5000), st("b", 9, 8000)), 2)
    assert (v.holder, v.fencing_token) == ("a", 8)
    assert v.expires_in_ms == 5000  # when the lease stops having 2 nodes
    assert v.last_fence == 9
    five = lock_view(["job"], nodes(*(st("a", 3, t) for t in (100, 500, 300, 400)), st()), 3)
    assert five.expires_in_ms == 300  # 3rd largest
    # same identity, different tokens: two different leases, neither on a quorum
    split = lock_view(["job"], nodes(st("a", 7, 10), st("a", 8, 10), st("b", 9, 10)), 2)
    assert split.holder is None


def test_semaphore_nodes_listing_holders_in_other_slots_still_name_them() -> None:
    """A limit-2 semaphore on 3 nodes (quorum 3): a and b each hold a slot on every node, but
    node 3 granted b its slot 0 first. No first-slot lease is on 3 nodes, yet both holders are:
    the view names the first of them (by token) and is held, as ``Semaphore.state()`` says."""
    a, b = Holder("a", 4, 9000), Holder("b", 5, 8000)
    ab = st("a", 4, 9000, fence=5, holders=(a, b))
    ba = st("b", 5, 8000, fence=5, holders=(b, a))
    v = lock_view(["job"], nodes(ab, ab, ba), 3)
    assert (v.holder, v.fencing_token, v.expires_in_ms, v.unknown) == ("a", 4, 9000, None)
    assert v.held and v.holders == (a, b)
    # a holder on only 2 of the 3 nodes is not named
    only_b = st("b", 5, 8000, fence=5, holders=(b,))
    w = lock_view(["job"], nodes(ab, ab, only_b), 3)
    assert w.holders == (b,) and (w.holder, w.fencing_token) == ("b", 5)


def test_a_stale_holder_on_a_minority_is_never_named() -> None:
    v = lock_view(["job"], nodes(st("stale", 2, 9000), st(), st(), st(), st()), 3)
    assert v.holder is None and v.unknown is None and v.nodes.healthy == 5


def test_unanswered_nodes_make_the_view_unknown_not_free() -> None:
    down = OSError("connection refused")
    # 3 of 5 answered and agree: named, 3 healthy
    v = lock_view(["job"], nodes(st("a", 3, 900), st("a", 3, 900), st("a", 3, 900), down, down), 3)
    assert (
        v.holder == "a"
        and v.nodes.healthy == 3
        and v.errors == {"n3": "connection refused", "n4": "connection refused"}
    )
    # 2 say a, 1 free, 2 down: a may hold a quorum with the silent nodes: unknown
    u = lock_view(["job"], nodes(st("a", 3, 900), st("a", 3, 900), st(), down, down), 3)
    assert u.holder is None and u.unknown is not None and "quorum" in u.unknown
    # fewer than a quorum answered: unknown, with the count
    gone = lock_view(["job"], nodes(st("a", 3, 900), st("a", 3, 900), down, down, down), 3)
    assert gone.holder is None and gone.nodes.healthy == 2 and not gone.nodes.reachable
    assert gone.unknown == "only 2 of 5 nodes answered (quorum 3)"


def test_multi_key_lease_is_named_only_when_every_key_agrees() -> None:
    def two(a: LockState, b: LockState) -> dict[str, Any]:
        return {"n0": {"x": a, "y": b}}

    both = lock_view(["x", "y"], two(st("a", 5, 900, name="x"), st("a", 5, 700, name="y")), 1)
    assert (both.holder, both.fencing_token, both.expires_in_ms) == ("a", 5, 700)
    partial = lock_view(["x", "y"], two(st("a", 5, 900, name="x"), st(name="y")), 1)
    assert partial.holder is None and partial.unknown and "not held as one lease" in partial.unknown
    other = lock_view(["x", "y"], two(st("a", 5, 900, name="x"), st("b", 6, 900, name="y")), 1)
    assert other.holder is None and other.unknown
    free = lock_view(["x", "y"], two(st(name="x"), st(name="y")), 1)
    assert free.holder is None and free.unknown is None


def test_document_is_the_status_contract() -> None:
    v = lock_view(["job"], nodes(st("a", 4, 900, acquired_ms=1_700_000_000_000)), 1)
    doc = lockview.document(v)
    assert doc == {
        "holder": "a",
        "fencing_token": 4,
        "expires_in_ms": 900,
        "acquired_at": "2023-11-14T22:13:20.000Z",
        "renewed_at": None,
        "transitions": 0,
        "nodes": {"total": 1, "healthy": 1, "quorum": 1},
        "holder_unknown": None,
        "nodes_not_counting": {},
        "holders": [],
    }
    assert lockview.document(v, expires_in_ms=100)["expires_in_ms"] == 100
    listed = (Holder("a", 4, 900), Holder("b", 6, 50))
    sem = lock_view(["job"], nodes(st("a", 4, 900, holders=listed)), 1)
    assert lockview.document(sem, age_ms=40)["holders"] == [
        {"holder": "a", "fencing_token": 4, "expires_in_ms": 860},
        {"holder": "b", "fencing_token": 6, "expires_in_ms": 10},
    ]
    # b's slot expired since the read: it may be another's by now, so b is not named
    assert lockview.document(sem, age_ms=50)["holders"] == [
        {"holder": "a", "fencing_token": 4, "expires_in_ms": 850},
    ]
    empty = lockview.document(lockview.empty(["job"], 3, 2))
    assert empty["holder"] is None and empty["nodes"]["healthy"] == 0 and empty["holder_unknown"]


def probe(run_id: str, marker: str | None, uptime: float = 100.0) -> Probe:
    return Probe(run_id, uptime=uptime, at=0.0, marker=marker, durable=False)


def test_nodes_restarted_empty_answer_but_do_not_count() -> None:
    answers = nodes(st(), st(), st())  # the two empty nodes and the intact one all say "free"
    marks = {"n0": probe("a", "a"), "n1": probe("b2", None), "n2": probe("c2", None)}
    v = lock_view(["job"], answers, 2, probes=marks, strict_restart=True)
    assert v.nodes.as_dict() == {"total": 3, "healthy": 1, "quorum": 2}
    assert not v.nodes.reachable
    assert v.holder is None and v.unknown is not None  # unknown, not "free"
    assert "only 1 of 3 nodes count (quorum 2)" in v.unknown and "n1, n2" in v.unknown
    assert set(v.outside) == {"n1", "n2"} and {o.kind for o in v.outside.values()} == {OPERATOR}
    assert v.unhealthy_nodes == ("n1", "n2") and v.healthy_nodes == ("n0",)
    doc = lockview.document(v)
    assert doc["nodes"]["healthy"] == 1 and doc["holder_unknown"] == v.unknown
    assert set(doc["nodes_not_counting"]) == {"n1", "n2"}
    assert "cannot rejoin by itself" in doc["nodes_not_counting"]["n1"]
    # by default (issue 36) the same nodes rejoin by themselves, and every surface says when
    default = lockview.document(lock_view(["job"], answers, 2, probes=marks, restart_delay=30))
    assert default["nodes"]["healthy"] == 1 and default["holder_unknown"]
    assert default["nodes_not_counting"]["n1"] == (
        "restarted without its data; rejoins by itself at the next lock operation"
    )


def test_a_lease_only_on_nodes_that_do_not_count_is_never_named() -> None:
    # one empty node took a late write; the two intact ones say free: the lock is free
    answers = nodes(st(), st(), st("late", 1, 900))
    marks = {"n0": probe("a", "a"), "n1": probe("b", "b"), "n2": probe("c2", None, uptime=1)}
    v = lock_view(["job"], answers, 2, probes=marks, restart_delay=30.0)
    assert v.holder is None and v.unknown is None and v.nodes.healthy == 2
    assert v.outside["n2"].kind == REJOINING and "in 30s" in v.outside["n2"].why
    # the holder on the two intact nodes is named; the third is still out
    held = lock_view(["job"], nodes(st("a", 5, 900), st("a", 5, 800), st()), 2, probes=marks)
    assert (held.holder, held.fencing_token, held.nodes.healthy) == ("a", 5, 2)


def test_notices_log_each_node_once_and_operator_cases_again_later() -> None:
    notices = Notices(every=300.0)
    marks = {"n0": probe("a", "a"), "n1": probe("b2", None), "n2": probe("c2", None)}
    stuck = lock_view(["job"], nodes(st(), st(), st()), 2, probes=marks, strict_restart=True)
    due, back = notices.due(stuck, now=0.0)
    assert [n for n, _ in due] == ["n1", "n2"] and back == []
    assert notices.due(stuck, now=10.0) == ([], [])  # not once per read
    again, _ = notices.due(stuck, now=300.0)  # still needs an operator: said again
    assert [n for n, _ in again] == ["n1", "n2"]
    # n2 vouched for: n1 now rejoins by itself (a new kind: one line), n2 counts again
    marks = {**marks, "n2": probe("c2", "c2")}
    rejoining = lock_view(["job"], nodes(st(), st(), st()), 2, probes=marks, strict_restart=True)
    due, back = notices.due(rejoining, now=301.0)
    assert [(n, o.kind) for n, o in due] == [("n1", REJOINING)] and back == ["n2"]
    assert notices.due(rejoining, now=10_000.0) == ([], [])  # rejoining is never repeated
