"""Run the benchmark: ``python -m bench [--quick] [--only uncontended,handoff,failover]``.

Writes bench/results.json, docs/benchmarks.md and docs/handoff.png (paths configurable) and
prints the targets table. Exit status 0 even when a target is missed: targets are reported,
not asserted; a scenario that cannot run here (no sidecar yet, no quorum module, no
redis-benchmark) is reported as skipped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = (
    "uncontended", "client", "server", "handoff", "failover", "quorum", "waiters", "longpoll",
)  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """How long each scenario runs; ``full`` targets < 10 min, ``quick`` < 1 min on 2 cores."""

    pair_seconds: float
    pair_reps: int
    pair_warmup: float
    ref_requests: int
    handoff_seconds: float
    handoff_reps: int
    failover_reps: int
    failover_ttl: float
    idle_seconds: float
    longpoll_reps: int


PLANS = {
    "full": Plan(1.0, 5, 0.3, 40_000, 1.0, 4, 5, 2.0, 10.0, 20),
    "quick": Plan(0.25, 2, 0.1, 10_000, 0.5, 1, 2, 1.0, 2.0, 3),
}


def _measure(only: list[str], mode: str, plan: Plan, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the selected scenarios; each one's results under its name."""
    from bench import failover, handoff, uncontended

    results: dict[str, Any] = {}
    if "uncontended" in only:
        results["uncontended"] = uncontended.scenario(
            seconds=plan.pair_seconds, reps=plan.pair_reps, warmup=plan.pair_warmup,
            ref_requests=plan.ref_requests, log=log,
        )  # fmt: skip
    if "client" in only:
        from bench import client

        # callgrind's counts only in the full run (about 3 minutes); calls in both
        results["client"] = client.scenario(with_instructions=None if mode == "full" else False)
    if "server" in only and mode == "full":  # callgrind: about 10 s
        from bench import instructions

        results["server"] = instructions.scenario(log=log)
    if "handoff" in only:
        results["handoff"] = handoff.scenario(
            seconds=plan.handoff_seconds, reps=plan.handoff_reps, log=log
        )
    if "failover" in only:
        results["failover"] = failover.scenario(
            reps=plan.failover_reps, ttl=plan.failover_ttl, idle_seconds=plan.idle_seconds,
            log=log,
        )  # fmt: skip
    if "quorum" in only:
        from bench import quorum_compare

        results["quorum"] = quorum_compare.scenario(seconds=plan.handoff_seconds * 2, log=log)
    if "waiters" in only:
        from bench import waiters

        counts = waiters.COUNTS if mode == "full" else waiters.COUNTS[:3]
        results["waiters"] = waiters.scenario(counts, log=log)
    if "longpoll" in only:
        from bench import measure_longpoll

        results["longpoll"] = measure_longpoll.scenario(reps=plan.longpoll_reps, log=log)
    return results


def main(argv: list[str] | None = None) -> int:
    from bench import report
    from bench.runinfo import arguments, collect
    from bench.targets import evaluate

    args, only = arguments(
        "python -m bench",
        __doc__,
        SCENARIOS,
        {
            "json": ROOT / "bench" / "results.json",
            "markdown": ROOT / "docs" / "benchmarks.md",
            "chart": ROOT / "docs" / "handoff.png",
        },
        argv,
    )
    results = collect(args, PLANS, lambda mode, plan, log: _measure(only, mode, plan, log))
    has_chart = report.chart(results, args.chart)
    rel = os.path.relpath(args.chart, args.markdown.parent) if has_chart else None
    args.markdown.write_text(report.markdown(results, rel))
    print()
    for c in evaluate(results):
        met = "n/a" if c.met is None else ("met" if c.met else "MISSED")
        print(f"  {met:<6} {c.target}: {c.measured}")
    written = ([] if args.render_only else [args.json]) + [args.markdown]
    written += [args.chart] if has_chart else []
    print("\nwrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main())
