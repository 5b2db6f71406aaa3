"""One checked target of a benchmark run and the helpers that make one (shared by
bench/targets.py and the scenarios that add their own rows: bench/quorum_compare.py,
bench/waiters.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run (skipped)


def _rate(results: dict[str, Any], name: str) -> float:
    for row in results.get("uncontended", {}).get("contenders", []):
        if row["name"] == name and not row.get("skipped"):
            return float(row["pairs_per_s"])
    return math.nan


def _ratio_check(label: str, ours: float, theirs: float, need: float) -> Check:
    if math.isnan(ours) or math.isnan(theirs) or not theirs:
        return Check(label, "not measured", None)
    r = ours / theirs
    return Check(label, f"{r:.2f}x ({ours:,.0f} vs {theirs:,.0f} pairs/s)", r >= need)
