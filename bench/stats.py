"""Pure statistics for the benchmark: medians, percentiles, interleaving, hand-off analysis.

No I/O here, so it can be unit-tested (tests/bench) and reused by every scenario.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def ratio(value: float, reference: float) -> float:
    """``value / reference``; NaN when either is missing or the reference is zero."""
    if not reference or math.isnan(reference) or math.isnan(value):
        return math.nan
    return value / reference


def rotations(items: Sequence[T], reps: int) -> list[list[T]]:
    """Interleaved repetition orders: rep ``i`` runs ``items`` rotated by ``i``.

    Every contender runs once per repetition and takes every position in turn, so slow drifts
    of the machine (other processes, thermal limits) hit all contenders alike.
    """
    n = len(items)
    if n == 0:
        return [[] for _ in range(reps)]
    return [[items[(i + k) % n] for k in range(n)] for i in range(reps)]


@dataclass(frozen=True)
class Section:
    """One critical section of one process, on the shared monotonic clock (seconds).

    ``asked``: acquire called; ``got``: acquire returned; ``release``: release called;
    ``done``: release returned.
    """

    proc: int
    asked: float
    got: float
    release: float
    done: float


@dataclass(frozen=True)
class HandoffStats:
    """What the contended scenario reports (milliseconds and per-second rates)."""

    sections: int
    handoffs: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    worst_wait_ms: float
    p99_wait_ms: float
    handoffs_per_s: float
    sections_per_s: float
    latencies_ms: list[float]


def handoff_latencies(sections: Iterable[Section], end: float | None = None) -> list[float]:
    """Hand-off latencies in ms: next holder's acquire return - previous holder's release call.

    Only pairs where another process took the lock count (a greedy re-acquire by the same
    process is not a hand-off). With ``end``, hand-offs acquired after it are ignored.
    """
    ordered = sorted(sections, key=lambda s: s.got)
    out = []
    for prev, nxt in itertools.pairwise(ordered):
        if end is not None and nxt.got > end:
            break
        if nxt.proc != prev.proc:
            out.append((nxt.got - prev.release) * 1000.0)
    return out


def overlaps(sections: Iterable[Section]) -> int:
    """How many sections began before the previous one was released (mutual-exclusion breaks)."""
    ordered = sorted(sections, key=lambda s: s.got)
    return sum(1 for prev, nxt in itertools.pairwise(ordered) if nxt.got < prev.release)


def analyse_handoff(sections: Sequence[Section], start: float, end: float) -> HandoffStats:
    """Summarise one contended run over the window ``[start, end]``.

    Rates and hand-off latencies count sections acquired inside the window (the drain after
    ``end``, with fewer contenders, is left out). Waits count every section: a waiter starved
    until the others stopped competing still shows its whole wait.
    """
    inside = [s for s in sections if start <= s.got <= end]
    lat = handoff_latencies(sections, end)
    waits = [(s.got - s.asked) * 1000.0 for s in sections]
    span = max(end - start, 1e-9)
    return HandoffStats(
        sections=len(inside),
        handoffs=len(lat),
        p50_ms=percentile(lat, 50),
        p99_ms=percentile(lat, 99),
        max_ms=max(lat) if lat else math.nan,
        worst_wait_ms=max(waits) if waits else math.nan,
        p99_wait_ms=percentile(waits, 99),
        handoffs_per_s=len(lat) / span,
        sections_per_s=len(inside) / span,
        latencies_ms=lat,
    )


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and count of repeated measurements (for results.json)."""
    return {
        "median": median(values),
        "min": min(values) if values else math.nan,
        "max": max(values) if values else math.nan,
        "n": float(len(values)),
    }
