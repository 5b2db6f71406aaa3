"""The lock view (pure): the one quorum rule every surface renders."""

from __future__ import annotations

from typing import Any

from redlease.core import view as lockview
from redlease.core.state import LockState
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
    }
    assert lockview.document(v, expires_in_ms=100)["expires_in_ms"] == 100
    empty = lockview.document(lockview.empty(["job"], 3, 2))
    assert empty["holder"] is None and empty["nodes"]["healthy"] == 0 and empty["holder_unknown"]
