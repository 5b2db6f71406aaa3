"""Reads chaos histories and counts violations (pure: no I/O).

Every observation is an *interval* of one shared clock (:func:`chaos.clock.now`): an acquire
happened somewhere between the moment it was *called* and the moment it *returned*; a sidecar's
``/status`` answer was computed somewhere between the request being *sent* and the answer being
*received*. A process can be paused anywhere (that is what chaos does to it), so the moment it
writes an observation down proves nothing about when the observed thing happened. Every rule
below therefore only counts what the intervals *prove*: "B happened after A" means B's interval
starts after A's interval ends.

Counted per scenario:

* ``token_regressions``: acquisitions that started after another acquisition had returned and
  got a fencing token that is not greater. Must be 0 under the documented assumptions.
* ``dual_leader_samples``: ``/status`` answers of ``leader: true`` whose request was sent after
  another sidecar's ``leader: true`` answer with a *higher* token had been received: that
  newer leadership was granted only after this one's lease had ended, so this claim came too
  late. Must be 0 (the sidecar steps down at its local deadline, before the lease ends).
* ``stale_claim_samples``: ``/status`` answers of ``leader: true`` with a higher token than a
  claim a sidecar had published in its state file and could no longer withdraw (its volume
  made read-only), received before that claim's ``leader_until``: the lease was handed on while
  a reader of the file could still trust the old leader. Must be 0.
* ``stale_writes_accepted``: resource writes accepted with a token lower than one it had
  already seen (the resource decides this atomically in Lua, so no timing is involved). Must be
  0 with fencing. For a counting semaphore of limit N: lower than the N-th highest it had seen
  (so at most N holders' writes are ever accepted side by side; chaos.resource).
  ``stale_writes_refused``: the stale writes the fenced resource turned away (each would have
  corrupted an unfenced resource).
* ``overlapping_pairs``: pairs of critical sections of different tokens that certainly ran at
  the same time; ``sections_overlapped``: sections in at least one such pair. A section is
  taken from when its acquire returned to when its last write was sent: a sub-interval of the
  time its holder really believed it held the lock, so an intersection is proven. Pauses cause
  these; they are what fencing is for, not a failure.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple


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
    frozen_claims: int = 0
    stale_claim_samples: int = 0

    @property
    def safe(self) -> bool:
        """No violation of a guarantee (overlaps are expected under pauses: fencing covers them)."""
        return not (
            self.stale_writes_accepted
            or self.token_regressions
            or self.dual_leader_samples
            or self.stale_claim_samples
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class Observed(NamedTuple):
    """Something that happened at an unknown moment in ``[start, end]`` and carried ``token``."""

    start: float
    end: float
    token: int


def count_late(observations: Iterable[Observed], *, strict: bool) -> int:
    """Observations that began after another one had ended and carry a lower token.

    ``strict``: an *equal* token counts too (two acquisitions must never share a token; two
    ``/status`` answers of the same leadership do). Only real-time order proven by the intervals
    is used: overlapping intervals can have happened in either order and are never compared.
    """
    obs = list(observations)
    ends = sorted((o.end, o.token) for o in obs)
    # best_before[i]: the highest token among the first i observations to end
    best_before = [-1]
    for _end, token in ends:
        best_before.append(max(best_before[-1], token))
    late = 0
    for o in obs:
        ended_before = bisect.bisect_left(ends, (o.start, -1))  # ends strictly before o.start
        best = best_before[ended_before]
        if o.token < best or (strict and o.token == best):
            late += 1
    return late


def acquisitions(events: Iterable[dict[str, Any]]) -> list[Observed]:
    """Each successful acquire as [called, returned]."""
    return [
        Observed(e["called"], e["returned"], e["token"]) for e in events if e["event"] == "acquired"
    ]


def count_regressions(events: Iterable[dict[str, Any]]) -> int:
    return count_late(acquisitions(events), strict=True)


Sample = tuple[float, float, str, bool, int | None]  # (sent, received, who, leader, token)


def count_dual_leaders(samples: Iterable[Sample]) -> int:
    """Leader claims made after a higher-token leader had already claimed (see module doc)."""
    claims = [Observed(t0, t1, tok) for t0, t1, _who, leader, tok in samples if leader and tok]
    return count_late(claims, strict=False)


class Claim(NamedTuple):
    """A published leader claim of ``token`` that readers may trust until ``end`` (at the
    earliest: ``end`` is a lower bound on the one clock)."""

    end: float
    token: int


def count_stale_claims(claims: Iterable[Claim], samples: Iterable[Sample]) -> int:
    """Leader answers of a newer term received before an older published claim ran out: the
    newer term was granted (before the answer was received) while the claim still held."""
    claims = list(claims)
    return sum(
        1
        for _t0, t1, _who, leader, tok in samples
        if leader and tok and any(tok > c.token and t1 < c.end for c in claims)
    )


def intervals(events: Iterable[dict[str, Any]]) -> list[tuple[float, float, int, str]]:
    """Critical sections as (start, end, token, client) from client history events.

    From the acquire's return to the moment the holder's last write was sent: the holder
    certainly believed it held the lock all that time. Events written down later (``releasing``,
    ``lost``) are not used, because a pause before writing them would stretch the section.
    """
    spans: dict[tuple[str, int], list[float]] = {}
    for e in events:
        if "token" not in e:
            continue
        key = (e["client"], e["token"])
        if e["event"] == "acquired":
            spans[key] = [e["returned"], e["returned"]]
        elif key in spans and e["event"] == "write":
            spans[key][1] = max(spans[key][1], e["sent"])
    return sorted((s, t, tok, c) for (c, tok), (s, t) in spans.items())


def count_overlaps(spans: Sequence[tuple[float, float, int, str]]) -> tuple[int, int]:
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


def check(
    events: list[dict[str, Any]],
    attempts: list[dict[str, Any]],
    samples: list[Sample] | None = None,
    claims: list[Claim] | None = None,
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
    v.frozen_claims = len(claims or [])
    v.stale_claim_samples = count_stale_claims(claims or [], samples or [])
    return v
