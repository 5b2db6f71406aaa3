"""The benchmark's pure statistics (no Redis needed)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import reference, stats  # noqa: E402
from bench.stats import Section  # noqa: E402
from bench.targets import evaluate  # noqa: E402


def test_percentile_interpolates() -> None:
    assert stats.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert stats.percentile([5], 99) == 5
    assert stats.percentile([3, 1, 2], 0) == 1
    assert stats.percentile([3, 1, 2], 100) == 3
    assert math.isnan(stats.percentile([], 50))


def test_ratio_handles_missing_reference() -> None:
    assert stats.ratio(10, 20) == 0.5
    assert math.isnan(stats.ratio(10, 0))
    assert math.isnan(stats.ratio(math.nan, 20))


def test_rotations_put_every_contender_in_every_position() -> None:
    orders = stats.rotations(["a", "b", "c"], 3)
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert stats.rotations([], 2) == [[], []]


def _sec(proc: int, got: float, hold: float = 0.001, asked: float | None = None) -> Section:
    return Section(proc, got if asked is None else asked, got, got + hold, got + hold + 0.0001)


def test_handoff_counts_only_changes_of_holder() -> None:
    secs = [_sec(0, 0.0), _sec(0, 0.0015), _sec(1, 0.003), _sec(0, 0.0045)]
    lat = stats.handoff_latencies(secs)
    # 0 -> 0 is a greedy re-acquire; 0 -> 1 and 1 -> 0 are hand-offs of 0.5 ms each
    assert lat == pytest.approx([0.5, 0.5])
    assert stats.handoff_latencies(secs, end=0.004) == pytest.approx([0.5])


def test_analyse_reports_rates_waits_and_starvation() -> None:
    secs = [_sec(0, 0.0), _sec(1, 0.002), _sec(0, 0.004), _sec(1, 1.5, asked=0.001)]
    st = stats.analyse_handoff(secs, 0.0, 1.0)
    assert st.sections == 3  # the late one is outside the window
    assert st.handoffs == 2
    assert st.p50_ms == pytest.approx(1.0)
    assert st.worst_wait_ms == pytest.approx(1499.0)  # the starved waiter still counts
    assert st.sections_per_s == pytest.approx(3.0)


def test_overlaps_detect_broken_mutual_exclusion() -> None:
    assert stats.overlaps([_sec(0, 0.0), _sec(1, 0.0005)]) == 1
    assert stats.overlaps([_sec(0, 0.0), _sec(1, 0.002)]) == 0


def test_redis_benchmark_csv() -> None:
    text = '"test","rps","avg_latency_ms"\n"SET","52910.05","0.054"\n'
    assert reference.parse_csv(text) == pytest.approx(52910.05)
    with pytest.raises(ValueError, match="no SET row"):
        reference.parse_csv("garbage")


def test_targets_report_missing_scenarios_as_not_measured() -> None:
    results = {
        "uncontended": {
            "contenders": [
                {"name": "redlease Lock", "pairs_per_s": 130.0},
                {"name": "redis-py Lock", "pairs_per_s": 100.0},
            ]
        },
        "failover": {"skipped": "skipped: sidecar unavailable"},
    }
    checks = {c.target: c for c in evaluate(results)}
    assert checks["sync pairs/s >= 1.25x redis-py Lock"].met is True
    assert checks["asyncio pairs/s >= 1.25x redis.asyncio Lock"].met is None
    assert checks["client instructions/pair <= 0.8x redis-py Lock's"].met is None
    assert "sidecar unavailable" in checks["SIGTERM failover p50 <= 50 ms"].measured
    assert checks["server instructions/pair <= 1.15x the contract floor"].met is None


def test_server_instructions_are_held_to_the_contract_floor() -> None:
    from bench.instructions import CONTRACT_FLOOR

    def server(ours: float) -> dict[str, object]:
        per = {"redlease Lock": ours, CONTRACT_FLOOR: 100_000.0, "redis-py Lock": 34_000.0}
        return {"server": {"goal": 1.15, "contract_floor": CONTRACT_FLOOR, "per_pair": per}}

    label = "server instructions/pair <= 1.15x the contract floor"
    met = {c.target: c for c in evaluate(server(110_000.0))}[label]
    assert met.met is True and met.measured.startswith("1.10x (110.0k vs 100.0k)")
    assert {c.target: c for c in evaluate(server(120_000.0))}[label].met is False
    skipped = {c.target: c for c in evaluate({"server": {"skipped": "needs valgrind on PATH"}})}
    assert skipped[label].measured == "needs valgrind on PATH"


def test_markdown_renders_partial_results_without_reference() -> None:
    from bench.report import markdown

    results = {
        "mode": "quick",
        "started": "now",
        "duration_s": 1.0,
        "environment": {
            "cpus": 2,
            "python": "3.11",
            "redis_server": "6.2.6",
            "load_before": "0 0 0",
            "load_after": "0 0 0",
            "versions": {"redlease": "0.1.0"},
        },
        "uncontended": {
            "reference": {"set_per_s": math.nan, "samples": [], "available": False},
            "contenders": [
                {
                    "name": "redlease Lock",
                    "group": "sync",
                    "ours": True,
                    "pairs_per_s": 100.0,
                    "samples": [90.0, 100.0, 110.0],
                    "ratio_to_reference": math.nan,
                    "skipped": None,
                },
                {
                    "name": "redlease Lock (3 nodes)",
                    "group": "quorum",
                    "ours": True,
                    "pairs_per_s": math.nan,
                    "samples": [],
                    "ratio_to_reference": math.nan,
                    "skipped": "skipped: redlease.quorum unavailable",
                },
            ],
        },
        "failover": {
            "ttl_s": 1.0,
            "reps": 2,
            "baseline_retry_s": 0.133,
            "baseline": {"p50_ms": 900.0, "min_ms": 850.0, "max_ms": 950.0},
            "skipped": "skipped: sidecar unavailable (not installed)",
        },
    }
    text = markdown(results, None)
    assert "**unavailable**" in text
    assert "skipped: redlease.quorum unavailable" in text
    assert "| baseline: TTL expiry | 900.0 |" in text
    assert text.count("sidecar unavailable") >= 3


def test_targets_take_the_worst_redlease_handoff_run() -> None:
    def row(
        lib: str, procs: int, mode: str, p50: float, p99: float, wait: float
    ) -> dict[str, object]:
        return {
            "library": lib,
            "processes": procs,
            "mode": mode,
            "p50_ms": p50,
            "p99_ms": p99,
            "worst_wait_ms": wait,
        }

    results = {
        "handoff": {
            "rows": [
                row("redlease", 2, "greedy", 0.2, 0.6, 3.0),
                row("redlease", 8, "greedy", 0.45, 2.5, 20.0),
                row("python-redis-lock", 8, "greedy", 9.0, 90.0, 900.0),
            ]
        }
    }
    checks = {c.target: c for c in evaluate(results)}
    assert checks["hand-off p50 <= 0.5 ms (every redlease run)"].met is True
    p99 = checks["hand-off p99 <= 2 ms (every redlease run)"]
    assert p99.met is False
    assert "8 procs, greedy" in p99.measured
    assert checks["8 procs greedy: worst wait <= 50 ms"].met is True
