"""Run the scale curves: ``python -m bench.scale [--quick] [--only operator,fleet,...]``.

Writes bench/scale.json (every point, the load average around each curve) and docs/scale.md
with one PNG per curve beside it; prints each curve's goals at its smallest and largest point.
Goals are reported, never asserted: exit status 0 when one is missed. ``make bench-scale``
(<= 15 min on 2 cores) and ``make bench-scale-quick`` (< 2 min, fewer points) run it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CURVES = ("operator", "fleet", "waiters", "quorum", "floor")


@dataclass(frozen=True)
class Plan:
    """How many points and how long each curve runs."""

    operator: tuple[int, ...]
    operator_window: float
    operator_first_pass: float
    fleet: tuple[int, ...]
    fleet_window: float
    waiters: tuple[int, ...]
    quorum_pairs: int
    quorum_rounds: int
    floor_pairs: int
    floor_reps: int


PLANS = {
    "full": Plan(
        operator=(100, 500, 1000, 5000),
        operator_window=8.0,
        operator_first_pass=180.0,
        fleet=(10, 100, 500, 1000),
        fleet_window=20.0,
        waiters=(1, 10, 100, 500, 1000),
        quorum_pairs=2000,
        quorum_rounds=4,
        floor_pairs=3000,
        floor_reps=5,
    ),
    "quick": Plan(
        operator=(100, 500),
        operator_window=4.0,
        operator_first_pass=60.0,
        fleet=(10, 100),
        fleet_window=10.5,  # past one library check (RECHECK, 10 s) of every client
        waiters=(1, 100),
        quorum_pairs=300,
        quorum_rounds=2,
        floor_pairs=1000,
        floor_reps=3,
    ),
}


def _run(name: str, plan: Plan, log: Callable[[str], None]) -> dict[str, Any]:
    """One curve, with the load average before, during (as the curve records it) and after;
    a curve that fails is recorded with its error and the others still run."""
    load = [os.getloadavg()[0]]
    t0 = time.monotonic()
    try:
        out = _curve(name, plan, log)
    except Exception as exc:  # noqa: BLE001 - reported in the results
        log(f"{name}: {type(exc).__name__}: {exc}")
        out = {"error": f"{type(exc).__name__}: {exc}"}
    out["load_1min"] = [*load, *out.get("load_1min", []), os.getloadavg()[0]]
    out["duration_s"] = time.monotonic() - t0
    return out


def _curve(name: str, plan: Plan, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any]
    if name == "operator":
        from bench.scale import operator

        out = operator.scenario(
            plan.operator,
            log=log,
            min_window=plan.operator_window,
            first_pass_limit=plan.operator_first_pass,
        )
    elif name == "fleet":
        from bench.scale import fleet

        out = fleet.scenario(plan.fleet, window=plan.fleet_window, log=log)
    elif name == "waiters":
        from bench import waiters

        out = waiters.scenario(plan.waiters, log=log)
    elif name == "quorum":
        from bench.scale import quorum

        out = quorum.scenario(plan.quorum_pairs, plan.quorum_rounds, log=log)
    else:
        from bench.profile import floor_samples

        out = {
            "exec_us": floor_samples(plan.floor_pairs, plan.floor_reps),
            "pairs": plan.floor_pairs,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.runinfo import arguments, collect
    from bench.scale import report

    args, only = arguments(
        "python -m bench.scale",
        __doc__,
        CURVES,
        {"json": ROOT / "bench" / "scale.json", "markdown": ROOT / "docs" / "scale.md"},
        argv,
    )
    results = collect(
        args,
        PLANS,
        lambda mode, plan, log: {"curves": {name: _run(name, plan, log) for name in only}},
    )
    charts = report.charts(results, args.markdown.parent)
    args.markdown.write_text(report.markdown(results, charts))
    print()
    for g in report.goals(results):
        met = "n/a" if g.met is None else ("met" if g.met else "MISSED")
        print(f"  {met:<6} {g.curve}: {g.goal}: smallest {g.smallest}; largest {g.largest}")
    written = ([] if args.render_only else [args.json]) + [args.markdown, *charts.values()]
    print("\nwrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
