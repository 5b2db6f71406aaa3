"""Pure arithmetic of the scale curves: counter deltas, per-unit costs, growth and goals.

No I/O here (tests/bench/test_scale_curves.py): the scenarios take snapshots, these turn two
snapshots into the numbers the report shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench import stats

# A 1-minute load average above this marks a curve "measured on a loaded machine": a curve keeps
# up to 2 processes of its own busy (the client and a redis-server), so on 2 CPUs a quiet run
# reads up to about 2; more means other work competed with it.
LOADED = 2.5


def commandstats(info: Mapping[str, Any]) -> dict[str, tuple[int, float]]:
    """``INFO commandstats`` as ``{command: (calls, usec)}`` (``cmdstat_`` prefix dropped,
    lower case; ``evalsha`` and ``fcall`` stay apart)."""
    out: dict[str, tuple[int, float]] = {}
    for key, value in info.items():
        if key.startswith("cmdstat_") and isinstance(value, Mapping):
            out[key[len("cmdstat_") :].lower()] = (int(value["calls"]), float(value["usec"]))
    return out


def stat_delta(
    before: Mapping[str, tuple[int, float]],
    after: Mapping[str, tuple[int, float]],
    ignore: Sequence[str] = ("info", "config|resetstat", "config", "client|list", "ping"),
) -> dict[str, tuple[int, float]]:
    """Per-command (calls, usec) added between two :func:`commandstats` snapshots, leaving out
    the commands the harness itself sends to read the counters (``ignore``)."""
    out: dict[str, tuple[int, float]] = {}
    for name, (calls, usec) in after.items():
        if name in ignore:
            continue
        c0, u0 = before.get(name, (0, 0.0))
        if calls - c0 > 0:
            out[name] = (calls - c0, usec - u0)
    return out


def totals(delta: Mapping[str, tuple[int, float]]) -> tuple[int, float]:
    """(calls, usec) over every command of a :func:`stat_delta`."""
    return sum(c for c, _ in delta.values()), sum(u for _, u in delta.values())


def per(value: float, count: float) -> float:
    """``value / count``; NaN for no count."""
    return value / count if count else math.nan


def net_cpu_us(cpu_us: float, idle_us_per_s: float, seconds: float) -> float:
    """CPU microseconds of a window less what the server spends idle (its cron) in as long."""
    return max(0.0, cpu_us - idle_us_per_s * seconds)


def growth(points: Sequence[Mapping[str, Any]], x: str, y: str) -> float:
    """``y`` at the largest ``x`` over ``y`` at the smallest (1.0: flat); NaN if unmeasured."""
    rows = [p for p in points if _finite(p.get(y))]
    if len(rows) < 2:
        return math.nan
    lo, hi = min(rows, key=lambda p: p[x]), max(rows, key=lambda p: p[x])
    return stats.ratio(float(hi[y]), float(lo[y]))


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def loaded(loads: Sequence[float]) -> bool:
    """Whether any 1-minute load average recorded during a curve was above :data:`LOADED`."""
    return any(x > LOADED for x in loads)


@dataclass(frozen=True)
class Goal:
    """One goal of a curve, checked at its smallest and largest point (reported, not asserted)."""

    curve: str
    goal: str
    smallest: str
    largest: str
    met: bool | None  # None: not measured


def at_extremes(points: Sequence[Mapping[str, Any]], x: str) -> tuple[Mapping[str, Any], ...]:
    """The point with the smallest and the one with the largest ``x`` (one point: it twice;
    none: empty)."""
    if not points:
        return ()
    return min(points, key=lambda p: p[x]), max(points, key=lambda p: p[x])
