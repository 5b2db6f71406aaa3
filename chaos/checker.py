"""Reads chaos histories and counts violations (pure: no I/O).

Counted per scenario:
* ``overlapping_pairs``: pairs of critical sections of different fencing tokens whose
  monotonic-time intervals (acquired → last write/release) intersect; ``sections_overlapped``:
  critical sections in at least one such pair. Pauses cause these; they are what fencing is
  for, not a failure of the lock.
* ``stale_writes_accepted``: resource writes accepted with a token lower than one it had
  already seen. Must be 0 with fencing.
* ``stale_writes_refused``: stale writes the fenced resource turned away (each would have
  corrupted an unfenced resource).
* ``token_regressions``: acquisitions whose token was not above every token acquired before
  (in monotonic time). Must be 0 under the documented assumptions.
* ``dual_leader_samples``: ``/status`` answers of ``leader: true`` with a fencing token lower than
  that of a ``leader: true`` answer another sidecar had already given (received before this
  request was sent): two leaders at once, proven by the order of the samples alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Verdict:
    clients: int = 0
    critical_sections: int = 0
    writes: int = 0
    overlapping_pairs: int = 0
    sections_overlapped: int = 0
    stale_writes_accepted: int = 0
    stale_writes_refused: int = 0
    token_regressions: int = 0
    dual_leader_samples: int = 0
    leader_samples: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def intervals(events: Iterable[dict[str, Any]]) -> list[tuple[float, float, int, str]]:
    """Critical sections as (start, end, token, client) from client history events."""
    spans: dict[tuple[str, int], list[float]] = {}
    for e in events:
        if "token" not in e:
            continue
        key = (e["client"], e["token"])
        if e["event"] == "acquired":
            spans[key] = [e["mono"], e["mono"]]
        elif key in spans and e["event"] in ("write", "releasing", "lost"):
            # a section ends when its holder stops acting: its last write, or when it starts
            # to release (a release returns later, after the lock is already free)
            spans[key][1] = max(spans[key][1], e.get("sent", e["mono"]))
    return sorted((s, t, tok, c) for (c, tok), (s, t) in spans.items())


def count_overlaps(spans: list[tuple[float, float, int, str]]) -> tuple[int, int]:
    """(overlapping pairs, sections in at least one pair) of time-sorted critical sections."""
    pairs = 0
    involved: set[int] = set()
    for i, (_s1, e1, tok1, _c1) in enumerate(spans):
        for j in range(i + 1, len(spans)):
            s2, _e2, tok2, _c2 = spans[j]
            if s2 >= e1:
                break
            if tok2 != tok1:
                pairs += 1
                involved.update((i, j))
    return pairs, len(involved)


def count_regressions(events: Iterable[dict[str, Any]]) -> int:
    acquired = sorted((e["mono"], e["token"]) for e in events if e["event"] == "acquired")
    best = -1
    regressions = 0
    for _mono, token in acquired:
        if token <= best:
            regressions += 1
        best = max(best, token)
    return regressions


Sample = tuple[float, float, str, bool, int | None]  # (sent, received, who, leader, token)


def count_dual_leaders(samples: Iterable[Sample]) -> int:
    """Leader claims made after a higher-token leader had already claimed (see module doc)."""
    claims = sorted((t1, token) for _t0, t1, _w, leader, token in samples if leader and token)
    by_sent = sorted(s for s in samples if s[3] and s[4])
    best = -1
    i = 0
    dual = 0
    for t0, _t1, _who, _leader, token in by_sent:
        while i < len(claims) and claims[i][0] < t0:
            best = max(best, claims[i][1])
            i += 1
        if token is not None and token < best:
            dual += 1
    return dual


def check(
    events: list[dict[str, Any]],
    attempts: list[dict[str, Any]],
    samples: list[Sample] | None = None,
) -> Verdict:
    v = Verdict()
    v.clients = len({e["client"] for e in events})
    v.critical_sections = sum(1 for e in events if e["event"] == "acquired")
    v.writes = len(attempts)
    v.overlapping_pairs, v.sections_overlapped = count_overlaps(intervals(events))
    v.stale_writes_accepted = sum(
        1 for a in attempts if a["accepted"] and a["token"] < a["max_before"]
    )
    v.stale_writes_refused = sum(1 for a in attempts if not a["accepted"])
    v.token_regressions = count_regressions(events)
    v.leader_samples = len(samples or [])
    v.dual_leader_samples = count_dual_leaders(samples or [])
    return v
