"""The chaos checker counts what it claims to count, and only what real-time order proves
(pure, no Redis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chaos.checker import (
    Claim,
    Observed,
    check,
    count_dual_leaders,
    count_late,
    count_regressions,
    count_stale_claims,
)


def ev(client: str, event: str, mono: float, token: int | None = None, **kw: object) -> dict:
    e = {"client": client, "event": event, "mono": mono, **kw}
    if token is not None:
        e["token"] = token
    return e


def acquired(client: str, called: float, returned: float, token: int) -> dict:
    """An ``acquired`` event as chaos.client writes it (recorded right after returning)."""
    return ev(client, "acquired", returned, token, called=called, returned=returned)


def test_pause_between_grant_and_record_is_no_regression() -> None:
    """The reported false alarm: c0 is SIGSTOPped after Redis granted it token 1 but before it
    noted "acquired"; tokens 2..23 are granted meanwhile; c0 resumes and records token 1 last.
    Its acquire *started* before all the others, so the history is consistent."""
    events = [acquired("c0", 0.000, 5.200, 1)]  # granted at ~0.001, then paused 5 s
    t = 0.6  # c0's lease (TTL 0.5 s) expired: the others take turns
    for token in range(2, 24):
        who = f"c{1 + token % 3}"
        events.append(acquired(who, t, t + 0.01, token))
        events.append(ev(who, "releasing", t + 0.15, token))
        t += 0.2
    events.append(ev("c0", "lost", 5.201, 1))  # its local deadline had passed
    events.sort(key=lambda e: e["mono"])  # the order in which they were written down
    assert t < 5.2
    assert count_regressions(events) == 0
    v = check(events, [])
    assert v.token_regressions == 0 and v.safe


def test_true_regressions_are_caught() -> None:
    a = acquired("a", 0.0, 0.1, 5)
    lower = acquired("b", 0.2, 0.3, 4)  # started after a returned, lower token
    equal = acquired("c", 0.4, 0.5, 5)  # started after a returned, same token
    assert count_regressions([a, lower]) == 1
    assert count_regressions([a, equal]) == 1
    assert count_regressions([a, lower, equal]) == 2
    assert not check([a, lower], []).safe


def test_overlapping_acquires_may_come_in_either_order() -> None:
    a = acquired("a", 0.0, 0.3, 5)
    b = acquired("b", 0.2, 0.4, 4)  # called before a returned: b may have been granted first
    assert count_regressions([a, b]) == 0
    just_after = acquired("c", 0.3, 0.5, 3)  # called exactly when a returned: not *after* it
    assert count_regressions([a, just_after]) == 0


def test_dual_leaders_need_proof_in_real_time() -> None:
    samples = [
        (0.0, 0.1, "a", True, 1),
        (0.2, 0.3, "b", True, 2),  # b leads with token 2, answer received at 0.3
        (0.25, 0.35, "a", True, 1),  # sent before b's answer arrived: not proven
        (0.4, 0.5, "a", True, 1),  # sent after: a still claims with the older token
        (0.6, 0.7, "a", False, None),
        (0.8, 0.9, "b", True, 2),  # the same leadership again: fine
    ]
    assert count_dual_leaders(samples) == 1
    paused_observer = [
        (0.0, 3.0, "a", True, 1),  # the observer was paused while waiting for a's answer
        (1.0, 1.1, "b", True, 2),
    ]
    assert count_dual_leaders(paused_observer) == 0
    assert not check([], [], samples).safe


def test_a_newer_leader_before_a_published_claim_ran_out_is_counted() -> None:
    claims = [Claim(end=2.0, token=1)]  # a's state file says leader up to 2.0 (at the earliest)
    samples = [
        (1.0, 1.1, "a", True, 1),  # a itself: fine
        (1.5, 1.9, "b", True, 2),  # received before 2.0: b was granted while a's claim held
        (1.9, 2.1, "b", True, 2),  # may have been granted after 2.0: not proven
        (2.2, 2.3, "b", True, 2),
    ]
    assert count_stale_claims(claims, samples) == 1
    verdict = check([], [], samples, claims)
    assert verdict.stale_claim_samples == 1 and verdict.frozen_claims == 1 and not verdict.safe


def test_overlap_and_stale_write_counting() -> None:
    events = [
        acquired("a", 0.0, 0.0, 1),
        ev("a", "write", 0.1, 1, sent=0.1),
        acquired("b", 0.9, 1.0, 2),  # a was paused: its lease expired, b took over
        ev("a", "write", 1.2, 1, sent=1.2),  # a resumes and writes late
        ev("b", "write", 1.3, 2, sent=1.3),
        ev("b", "releasing", 1.4, 2),
        ev("b", "released", 9.0, 2),  # returns late: must not stretch the section
        acquired("c", 8.0, 8.1, 3),  # much later: overlaps nobody
        ev("c", "releasing", 8.2, 3),
    ]
    attempts = [
        {"client": "a", "token": 1, "accepted": 1, "max_before": -1},
        {"client": "b", "token": 2, "accepted": 1, "max_before": 1},
        {"client": "a", "token": 1, "accepted": 0, "max_before": 2},
    ]
    v = check(events, attempts)
    assert v.critical_sections == 3
    assert v.overlapping_pairs == 1
    assert v.sections_overlapped == 2
    assert v.stale_writes_refused == 1
    assert v.stale_writes_accepted == 0
    assert v.token_regressions == 0
    assert v.safe


def test_a_pause_before_writing_an_event_down_does_not_stretch_a_section() -> None:
    events = [
        acquired("a", 0.0, 0.1, 1),
        ev("a", "write", 0.2, 1, sent=0.2),
        ev("a", "releasing", 3.0, 1),  # paused after its last write, before noting this
        ev("a", "lost", 3.0, 1),
        acquired("b", 1.0, 1.1, 2),  # a's lease had expired: b holds
        ev("b", "write", 1.2, 2, sent=1.2),
    ]
    v = check(events, [])
    assert v.overlapping_pairs == 0 and v.token_regressions == 0


def test_unfenced_stale_write_is_counted() -> None:
    attempts = [
        {"client": "b", "token": 2, "accepted": 1, "max_before": 1},
        {"client": "a", "token": 1, "accepted": 1, "max_before": 2},
    ]
    v = check([], attempts)
    assert v.stale_writes_accepted == 1 and not v.safe


# --- property: any history a correct lock can produce passes; a planted violation is caught --

pause = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@st.composite
def correct_histories(draw: st.DrawFn) -> list[Observed]:
    """Grants at increasing real moments with increasing tokens; each acquire's interval
    [called, returned] contains its grant, with arbitrary pauses on either side."""
    grants = draw(st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=1, max_size=30))
    tokens = draw(
        st.lists(st.integers(1, 5), min_size=len(grants), max_size=len(grants))
    )  # the gaps between tokens (a quorum may skip numbers)
    history = []
    token = 0
    for g, gap in zip(sorted(set(grants)), tokens, strict=False):
        token += gap
        history.append(Observed(g - draw(pause), g + draw(pause), token))
    return history


@given(correct_histories())
def test_any_correct_history_passes(history: list[Observed]) -> None:
    assert count_late(history, strict=True) == 0


@given(correct_histories(), st.data())
def test_a_planted_regression_is_caught(history: list[Observed], data: st.DataObject) -> None:
    first = data.draw(st.sampled_from(history))
    gap = data.draw(st.floats(0.001, 5.0))
    lower = data.draw(st.integers(0, first.token))  # not greater than first's token
    planted = Observed(first.end + gap, first.end + gap + data.draw(pause), lower)
    assert count_late([*history, planted], strict=True) >= 1
