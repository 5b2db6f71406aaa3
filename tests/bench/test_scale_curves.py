"""The scale curves' pure arithmetic and their report (no Redis, no timing asserts)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.runinfo import clean, unclean  # noqa: E402
from bench.scale import curves, report  # noqa: E402


def test_commandstats_keeps_calls_and_usec_by_command() -> None:
    info = {
        "cmdstat_evalsha": {"calls": 3, "usec": 30, "usec_per_call": 10.0},
        "cmdstat_function|list": {"calls": 1, "usec": 7},
        "used_memory": 5,
    }
    assert curves.commandstats(info) == {"evalsha": (3, 30.0), "function|list": (1, 7.0)}


def test_stat_delta_counts_only_what_was_added_and_ignores_the_harness() -> None:
    before = {"evalsha": (3, 30.0), "info": (5, 50.0), "get": (2, 2.0)}
    after = {"evalsha": (10, 100.0), "info": (9, 90.0), "get": (2, 2.0), "time": (4, 4.0)}
    delta = curves.stat_delta(before, after)
    assert delta == {"evalsha": (7, 70.0), "time": (4, 4.0)}
    assert curves.totals(delta) == (11, 74.0)


def test_per_and_net_cpu() -> None:
    assert curves.per(10, 4) == 2.5
    assert math.isnan(curves.per(10, 0))
    assert curves.net_cpu_us(1000.0, 100.0, 3.0) == 700.0
    assert curves.net_cpu_us(100.0, 100.0, 3.0) == 0.0  # never negative


def test_growth_is_largest_over_smallest_point() -> None:
    points = [{"n": 5000, "y": 2.6}, {"n": 100, "y": 2.0}, {"n": 500, "y": 9.0}]
    assert curves.growth(points, "n", "y") == pytest.approx(1.3)
    assert math.isnan(curves.growth(points[:1], "n", "y"))
    assert math.isnan(curves.growth([{"n": 1, "y": math.nan}, {"n": 2, "y": 1.0}], "n", "y"))


def test_loaded_above_two_and_a_half() -> None:
    """A curve keeps 2 processes of its own busy on 2 CPUs: up to 2.5 is a quiet run."""
    assert not curves.loaded([0.4, 2.0, 2.5])
    assert curves.loaded([0.4, 2.51])
    assert not curves.loaded([])


def test_at_extremes() -> None:
    assert curves.at_extremes([], "n") == ()
    one = {"n": 3}
    assert curves.at_extremes([one], "n") == (one, one)


def _results() -> dict:
    op = {
        "locks": 0,
        "seconds_per_refresh": 1.0,
        "locks_per_cycle": 1.0,
        "cpu_ms_per_lock": 0.1,
        "redis_us_per_lock": 10.0,
        "round_trips_per_cycle": 1.0,
        "api_requests_per_cycle": 0.0,
        "rss_mb": 60.0,
        "peak_rss_mb": 61.0,
        "first_status_s": 1.0,
        "first_pass_s": 2.0,
    }
    fleet = {
        "electors": 0,
        "processes": 1,
        "renewals_per_s": 5.0,
        "redis_exec_us_per_renewal": 100.0,
        "redis_calls_per_renewal": 20.0,
        "library_check_us_per_renewal": 5.0,
        "redis_cpu_us_per_renewal": 300.0,
        "redis_net_cpu_us_per_renewal": 200.0,
        "clients": 3,
    }
    return {
        "mode": "quick",
        "started": "now",
        "duration_s": 1.0,
        "environment": {
            "cpus": 2,
            "load_before": "0.1",
            "load_after": "0.2",
            "redis_server": "7.0",
            "python": "3.11",
        },
        "curves": {
            "operator": {
                "points": [
                    {**op, "locks": 100},
                    {**op, "locks": 5000, "cpu_ms_per_lock": 0.2, "peak_rss_mb": 200.0},
                ],
                "load_1min": [0.5, 3.0],
                "duration_s": 1.0,
            },
            "fleet": {
                "points": [{**fleet, "electors": 10}, {"electors": 1000, "error": "boom"}],
                "load_1min": [0.5],
                "duration_s": 1.0,
            },
            "floor": {
                "exec_us": {"redlease Lock": [12.0, 13.0], report.FLOOR: [10.0, 10.0]},
                "load_1min": [0.5],
                "duration_s": 1.0,
            },
        },
    }


def test_goals_at_the_extremes() -> None:
    by = {(g.curve, g.goal): g for g in report.goals(_results())}
    refresh = by["operator", "5,000 locks: every lock refreshed within 10 s"]
    assert refresh.met is True and "at 100" in refresh.smallest and "at 5,000" in refresh.largest
    assert by["operator", "5,000 locks: operator RSS <= 300 MB (peak)"].met is True
    cpu = [g for g in by.values() if g.goal.startswith("operator CPU per lock")]
    assert cpu[0].met is False  # 0.2 / 0.1 = 2x
    floor = next(g for g in by.values() if g.curve == "floor")
    assert floor.met is False and "1.25x" in floor.largest  # 12.5 / 10
    fleet = [g for g in by.values() if g.curve == "fleet"]
    assert all(g.met is None for g in fleet)  # one point left after the error: no growth
    assert all(g.met is None for g in by.values() if g.curve in ("waiters", "quorum"))


def test_markdown_flags_a_loaded_curve_only() -> None:
    text = report.markdown(_results(), {})
    assert text.count("Measured on a loaded machine, preliminary") == 1
    operator = text.split("## 1.")[1].split("## 2.")[0]
    assert "loaded machine" in operator
    assert "boom" in text  # an error row is shown, not dropped


def test_json_round_trip_keeps_nan_as_null() -> None:
    data = {"a": math.nan, "b": [1.0, math.nan], "error": "x"}
    assert clean(data) == {"a": None, "b": [1.0, None], "error": "x"}
    back = unclean(clean(data))
    assert math.isnan(back["a"]) and back["error"] == "x"
