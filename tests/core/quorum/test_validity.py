"""Unit tests of the pure quorum math (no Redis)."""

from __future__ import annotations

import random

import pytest

from redlease import ConfigError, errors
from redlease.core.replies import Outcome
from redlease.core.restart import (
    OPERATOR,
    REJOINING,
    WAITING,
    Probe,
    birth_list,
    born_members,
    brand_new,
    may_rejoin,
    membership,
    recovery,
    standing,
)
from redlease.core.rules import (
    LATE,
    Down,
    Reply,
    check_quorum,
    decide_acquire,
    extend_verdict,
    jitter,
    kth_largest,
    majority,
    raise_confirmed,
    release_verdict,
    reseed_sources,
    tally,
    validity,
)
from redlease.core.timing import drift


def granted(fence: int, count: int = 1, transitions: int = 1) -> Outcome:
    return Outcome(1, fence=fence, count=count, server_ms=10, transitions=transitions)


def held(holder: str = "h", ttl_ms: int = 500) -> Outcome:
    return Outcome(0, wait_hint_ms=ttl_ms, holder=holder)


def down() -> Down:
    return Down(errors.LockUnavailable("l", "cannot reach Redis", nodes=["n"]))


@pytest.mark.parametrize(("n", "q"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_majority(n: int, q: int) -> None:
    assert majority(n) == q
    assert check_quorum(n, None) == q
    assert 2 * q > n  # any two quorums share a node


def test_quorum_below_majority_refused() -> None:
    with pytest.raises(ConfigError, match="quorum"):
        check_quorum(5, 2)
    with pytest.raises(ConfigError, match="quorum"):
        check_quorum(3, 4)
    assert check_quorum(5, 5) == 5


def test_validity_subtracts_elapsed_and_drift() -> None:
    assert validity(10.0, 0.5) == pytest.approx(10.0 - 0.5 - drift(10.0))
    assert drift(10.0) == pytest.approx(0.102)
    assert validity(1.0, 0.99) < 0


def test_reseed_sources_meet_every_quorum() -> None:
    for n in range(1, 8):
        q = majority(n)
        k = reseed_sources(n, q)
        # any k nodes and any q nodes share at least one node
        assert k + q > n


def test_grant_takes_max_fence_and_raises_the_others() -> None:
    d = decide_acquire({0: granted(5), 1: granted(7), 2: held()}, 2, [0, 1, 2])
    assert d.granted and d.fence == 7
    assert d.raise_on == (0,)
    assert d.granted_nodes == (0, 1)
    assert raise_confirmed(d, {0: Reply([7, 1])}, 7, 2)
    assert not raise_confirmed(d, {0: LATE}, 7, 2)
    assert not raise_confirmed(d, {0: Reply([7, 0])}, 7, 2)  # no longer the owner there


def test_split_is_contention_with_undo_and_jitter() -> None:
    d = decide_acquire({0: granted(3), 1: held("x"), 2: held("y")}, 2, [0, 1, 2])
    assert not d.granted and not d.unavailable
    assert d.undo == (0,)
    assert d.wait_hint_ms == -1  # nobody holds a quorum: retry after jitter


def test_holder_on_a_quorum_gives_expiry_hint() -> None:
    d = decide_acquire({0: held("x", 300), 1: held("x", 200), 2: down()}, 2, [0, 1, 2])
    assert not d.granted and not d.unavailable
    assert d.holder == "x" and d.wait_hint_ms == 200


def test_too_few_answers_is_unavailable_and_late_nodes_are_undone() -> None:
    d = decide_acquire({0: granted(1), 1: LATE, 2: down()}, 2, [0, 1, 2])
    assert not d.granted and d.unavailable
    assert d.undo == (0, 1)
    assert d.failed_nodes == (1, 2)


def test_non_members_do_not_count() -> None:
    d = decide_acquire({0: granted(1), 1: granted(1)}, 2, [0])
    assert not d.granted


def test_reentry_never_raises() -> None:
    d = decide_acquire({0: granted(4, 2, -1), 1: granted(4, 2, -1), 2: LATE}, 2, [0, 1, 2])
    assert d.granted and d.reentry and d.transitions == -1 and d.count == 2
    assert d.raise_on == ()


def test_already_held() -> None:
    d = decide_acquire({0: Outcome(2, fence=9), 1: held()}, 2, [0, 1])
    assert d.already and d.fence == 9 and d.undo == ()


def test_extend_and_release_verdicts() -> None:
    t = tally({0: Reply([1, 5, 0]), 1: Reply([1, 5, 0]), 2: LATE}, range(3))
    assert t.ok == (0, 1) and t.failed == (2,)
    assert extend_verdict(t, 2, 0.01, 1.0) == "ok"
    assert extend_verdict(t, 2, 1.0, 1.0) == "lost"  # no validity left
    t = tally({0: Reply([1, 5, 0]), 1: Reply([0, 0, 0]), 2: LATE}, range(3))
    assert extend_verdict(t, 2, 0.01, 1.0) == "unavailable"
    t = tally({0: Reply([0, 0, 0]), 1: Reply([0, 0, 0]), 2: LATE}, range(3))
    assert extend_verdict(t, 2, 0.01, 1.0) == "lost"
    assert release_verdict(t, 2) == "not_owned"
    t = tally({0: Reply([0, 0]), 1: LATE, 2: down()}, range(3))
    assert release_verdict(t, 2) == "unavailable"
    t = tally({0: Reply([1, 0]), 1: LATE, 2: LATE}, range(3))
    assert release_verdict(t, 2) == "ok"


def test_kth_largest_and_jitter() -> None:
    assert kth_largest([0, 2, 1], 2) == 1
    assert kth_largest([], 1) == 0
    rng = random.Random(1)
    values = {jitter(rng) for _ in range(20)}
    assert len(values) == 20 and all(0.005 <= v <= 0.05 for v in values)


def test_restart_rule_membership() -> None:
    intact = Probe("r1", uptime=5, at=0, marker="r1", durable=False)
    restarted = Probe("r2", uptime=0, at=0, marker=None, durable=False)
    rdb_restore = Probe("r3", uptime=0, at=0, marker="r1", durable=False)
    aof_always = Probe("r4", uptime=0, at=0, marker="r1", durable=True)
    assert membership(intact) == "member"
    assert membership(restarted) == "fresh"
    assert membership(rdb_restore) == "fresh"  # a snapshot may miss recent fence increments
    # AOF + fsync always keeps a restart's data, but an older AOF backup looks the same
    assert membership(aof_always) == "fresh"
    assert membership(None) == "unknown"
    assert not may_rejoin(restarted, now=0.5, restart_delay=1.0)
    assert may_rejoin(restarted, now=1.0, restart_delay=1.0)


def test_brand_new_set_and_birth_list() -> None:
    fresh = [Probe(f"r{i}", uptime=1, at=0, marker=None, durable=False) for i in range(3)]
    assert brand_new(fresh)
    assert birth_list(fresh) == {"r0", "r1", "r2"}
    assert not brand_new([*fresh[:2], None])  # a node that did not answer may hold a history
    assert birth_list([*fresh[:2], None]) == frozenset()
    marked = Probe("r0", uptime=1, at=0, marker="r0", durable=False)
    assert not brand_new([marked, *fresh[1:]])
    rdb_restore = Probe("r3", uptime=0, at=0, marker="old", durable=False)
    # counts for nobody, but its marker shows a history (counters that may be behind): the set
    # comes back by the restart rule, not as a new one (issue 36)
    assert not brand_new([rdb_restore, *fresh[1:]])


def test_born_members_are_the_servers_on_a_birth_list() -> None:
    born = frozenset({"r0", "r1", "r2"})
    marked = Probe("r0", uptime=5, at=0, marker="r0", durable=False, born=born)
    not_yet = Probe("r1", uptime=5, at=0, marker=None, durable=False)
    restarted = Probe("r2-new", uptime=0, at=0, marker=None, durable=False)
    assert born_members([marked, not_yet, restarted]) == (1,)  # the new server stays out
    assert born_members([marked, not_yet, None]) == (1,)
    assert born_members([Probe("r0", 5, 0, "r0", False), not_yet, restarted]) == ()


def _node(
    run_id: str, marker: str | None, uptime: float = 0.0, born: frozenset[str] = frozenset()
) -> Probe:
    return Probe(run_id, uptime=uptime, at=0.0, marker=marker, durable=True, born=born)


def test_standing_counts_members_new_sets_and_born_nodes() -> None:
    born = frozenset({"a", "b", "c"})
    members = [_node("a", "a"), _node("b", "b"), _node("c", "c")]
    assert standing(members, 2, 60.0, now=0.0) == [None, None, None]
    new = [_node("a", None), _node("b", None), _node("c", None)]
    assert standing(new, 2, 60.0, now=0.0) == [None, None, None]  # marked at first contact
    not_yet = [_node("a", "a", born=born), _node("b", None), _node("c", "c", born=born)]
    assert standing(not_yet, 2, 60.0, now=0.0) == [None, None, None]
    assert standing([None, *members[1:]], 2, 60.0, now=0.0) == [None, None, None]


def test_standing_one_restarted_node_rejoins_by_itself() -> None:
    empty = _node("b2", None, uptime=10.0)
    why = standing([_node("a", "a"), empty, _node("c", "c")], 2, 60.0, now=5.0)
    assert why[0] is None and why[2] is None
    assert why[1] is not None and why[1].kind == REJOINING and not why[1].action
    assert why[1].why == "restarted without its data; rejoins by itself in 46s"  # 1s of grain
    late = standing([_node("a", "a"), empty, _node("c", "c")], 2, 60.0, now=51.0)[1]
    assert late is not None and late.why.endswith("rejoins by itself at the next lock operation")


def test_standing_two_of_three_restarted_empty_need_an_operator() -> None:
    probes = [_node("a", "a"), _node("b2", None, 100.0), _node("c2", None, 100.0)]
    why = standing(probes, 2, 60.0, now=0.0, strict=True)
    assert why[0] is None
    for w in why[1:]:
        assert w is not None and w.kind == OPERATOR
        assert "cannot rejoin by itself: 1 of 3 nodes kept their data, 2 needed" in w.why
        assert "DEL redlease:node" in w.action and "HSET" not in w.action
    # one intact node unreachable: the others may still come back by themselves
    waiting = standing([None, probes[1], _node("c", "c")], 2, 60.0, now=0.0, strict=True)[1]
    assert waiting is not None and waiting.kind == WAITING
    # by default both rejoin by themselves after restart_delay (clock-seeded, issue 36)
    for w in standing(probes, 2, 60.0, now=0.0)[1:]:
        assert w is not None and w.kind == REJOINING and "rejoins by itself" in w.why


def test_standing_foreign_marker_is_not_trusted_even_with_aof() -> None:
    restored = _node("b2", "b1", uptime=1.0)  # AOF from the run before (or an older backup)
    why = standing([_node("a", "a"), restored, _node("c", "c")], 2, 60.0, now=0.0)[1]
    assert why is not None and why.kind == REJOINING
    assert "earlier server run b1" in why.why
    stuck = standing([_node("a", "a"), restored, _node("c2", "c1")], 2, 60.0, now=0.0, strict=True)[
        1
    ]
    assert stuck is not None and stuck.kind == OPERATOR
    assert "HSET redlease:node run_id b2" in stuck.action
    assert recovery(restored, 60.0) == stuck.action
