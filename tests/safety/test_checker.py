"""The chaos checker counts what it claims to count (pure, no Redis)."""

from __future__ import annotations

from chaos.checker import check


def ev(client: str, event: str, mono: float, token: int | None = None, **kw: object) -> dict:
    e = {"client": client, "event": event, "mono": mono, **kw}
    if token is not None:
        e["token"] = token
    return e


def test_overlap_and_regression_counting() -> None:
    events = [
        ev("a", "acquired", 0.0, 1),
        ev("a", "write", 0.1, 1, sent=0.1),
        ev("b", "acquired", 1.0, 2),  # a was paused: its lease expired, b took over
        ev("a", "write", 1.2, 1, sent=1.2),  # a resumes and writes late
        ev("b", "write", 1.3, 2, sent=1.3),
        ev("b", "releasing", 1.4, 2),
        ev("b", "released", 9.0, 2),  # returns late: must not stretch the section
        ev("c", "acquired", 2.0, 2),  # a token that did not go up
    ]
    attempts = [
        {"client": "a", "token": 1, "accepted": 1, "max_before": -1},
        {"client": "b", "token": 2, "accepted": 1, "max_before": 1},
        {"client": "a", "token": 1, "accepted": 0, "max_before": 2},
    ]
    samples = [
        (0.0, 0.1, "a", True, 1),
        (0.2, 0.3, "b", True, 2),  # b leads with token 2, answer received at 0.3
        (0.25, 0.35, "a", True, 1),  # sent before b's answer arrived: not proven
        (0.4, 0.5, "a", True, 1),  # sent after: a still claims with the older token
        (0.6, 0.7, "a", False, None),
    ]
    v = check(events, attempts, samples)
    assert v.critical_sections == 3
    assert v.overlapping_pairs == 1
    assert v.sections_overlapped == 2
    assert v.stale_writes_refused == 1
    assert v.stale_writes_accepted == 0
    assert v.token_regressions == 1
    assert v.dual_leader_samples == 1


def test_unfenced_stale_write_is_counted() -> None:
    attempts = [
        {"client": "b", "token": 2, "accepted": 1, "max_before": 1},
        {"client": "a", "token": 1, "accepted": 1, "max_before": 2},
    ]
    assert check([], attempts).stale_writes_accepted == 1
