"""Render bench/scale.json: the goals at each curve's smallest and largest point, a table of
every point and one PNG per curve (drawn by :func:`bench.report.lines`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import stats
from bench.report import Panel, _n, lines
from bench.runinfo import run_line
from bench.scale import curves
from bench.scale.curves import Goal

FLAT = 1.3  # "flat": the largest point's cost per unit at most this times the smallest's
FLOOR = "floor (fenced lease, 7 calls)"


def _ok(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if "error" not in r]


def _pts(res: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return _ok((res or {}).get("points", []))


def _both(rows: Sequence[Mapping[str, Any]], x: str, fmt: Any) -> tuple[str, str]:
    ends = curves.at_extremes(rows, x)
    return (fmt(ends[0]), fmt(ends[1])) if ends else ("-", "-")


def _operator_goals(res: Mapping[str, Any] | None) -> list[Goal]:
    pts = _pts(res)
    if not pts:
        return [Goal("operator", "refresh cycle, RSS, per-lock cost", "-", "-", None)]
    big = max(pts, key=lambda p: p["locks"])
    at5k = big["locks"] >= 5000

    def at(p: Mapping[str, Any], key: str, unit: str, digits: int = 1) -> str:
        return f"{_n(p[key], digits)} {unit} at {p['locks']:,}"

    growth = curves.growth(pts, "locks", "cpu_ms_per_lock")
    redis_growth = curves.growth(pts, "locks", "redis_us_per_lock")
    return [
        Goal(
            "operator",
            "5,000 locks: every lock refreshed within 10 s",
            *_both(pts, "locks", lambda p: at(p, "seconds_per_refresh", "s", 2)),
            big["seconds_per_refresh"] <= 10 if at5k else None,
        ),
        Goal(
            "operator",
            "5,000 locks: operator RSS <= 300 MB (peak)",
            *_both(pts, "locks", lambda p: at(p, "peak_rss_mb", "MB", 0)),
            big["peak_rss_mb"] <= 300 if at5k else None,
        ),
        Goal(
            "operator",
            f"operator CPU per lock flat (<= {FLAT}x, largest / smallest)",
            *_both(pts, "locks", lambda p: at(p, "cpu_ms_per_lock", "ms", 3)),
            None if math.isnan(growth) else growth <= FLAT,
        ),
        Goal(
            "operator",
            f"Redis time per lock flat (<= {FLAT}x)",
            *_both(pts, "locks", lambda p: at(p, "redis_us_per_lock", "us", 1)),
            None if math.isnan(redis_growth) else redis_growth <= FLAT,
        ),
    ]


def _fleet_goals(res: Mapping[str, Any] | None) -> list[Goal]:
    pts = _pts(res)
    out = []
    for key, what in (
        ("redis_exec_us_per_renewal", "Redis execution"),
        ("redis_net_cpu_us_per_renewal", "Redis CPU (net of idle)"),
    ):
        g = curves.growth(pts, "electors", key)
        out.append(
            Goal(
                "fleet",
                f"{what} per renewal flat (<= {FLAT}x, largest / smallest fleet)",
                *_both(pts, "electors", lambda p, k=key: f"{_n(p[k], 1)} us at {p['electors']:,}"),
                None if math.isnan(g) else g <= FLAT,
            )
        )
    return out


def _worst(res: Mapping[str, Any], n: int, pick: Any) -> float:
    vals = [
        pick(r) for f in ("asyncio", "threads") for r in _ok(res.get(f, [])) if r["waiters"] == n
    ]
    return max(vals) if vals else math.nan


def _waiter_goals(res: Mapping[str, Any] | None) -> list[Goal]:
    if not res:
        return [Goal("waiters", "1,000 waiters", "-", "-", None)]
    counts = sorted({r["waiters"] for f in ("asyncio", "threads") for r in _ok(res.get(f, []))})
    if not counts:
        return [Goal("waiters", "1,000 waiters", "-", "-", None)]
    lo, hi = counts[0], counts[-1]
    at1k = hi >= 1000
    out = []
    for what, pick, unit, goal in (
        ("wake-up p99 <= 5 ms", lambda r: r["wakeup"]["p99_ms"], "ms", 5.0),
        (
            "timeout overshoot p99 <= 20 ms (one among N)",
            lambda r: r["timeout_among"]["p99_ms"],
            "ms",
            20.0,
        ),
        (
            "timeout overshoot p99 <= 20 ms (N deadlines at once)",
            lambda r: r["timeout"]["p99_ms"],
            "ms",
            20.0,
        ),
        (
            "connections per process O(locks): <= 5 for one lock",
            lambda r: r["connections_peak"],
            "",
            5.0,
        ),
        ("RSS of the process (no goal)", lambda r: r["rss_mb_waiting"], "MB", None),
    ):
        a, b = _worst(res, lo, pick), _worst(res, hi, pick)
        met = None if goal is None or not at1k or math.isnan(b) else b <= goal
        out.append(
            Goal(
                "waiters",
                f"1,000 waiters: {what}, worse of asyncio and threads",
                f"{_n(a, 1)} {unit} at {lo:,}",
                f"{_n(b, 1)} {unit} at {hi:,}",
                met,
            )
        )
    return out


def _quorum_goals(res: Mapping[str, Any] | None) -> list[Goal]:
    out = []
    for flavour in ("sync", "asyncio"):
        pts = [p for p in _pts(res) if p["flavour"] == flavour]
        out.append(
            Goal(
                "quorum",
                f"{flavour} acquire latency p50 / p99 (no goal)",
                *_both(
                    pts,
                    "nodes",
                    lambda p: f"{p['p50_ms']:.2f} / {p['p99_ms']:.2f} ms at {p['nodes']} nodes",
                ),
                None,
            )
        )
    return out


def floor_ratio(res: Mapping[str, Any] | None) -> tuple[float, float, float]:
    """(redlease us, floor us, ratio) per uncontended pair: medians of the repetitions."""
    ex = (res or {}).get("exec_us", {})
    ours = stats.median(ex.get("redlease Lock", []))
    floor = stats.median(ex.get(FLOOR, []))
    return ours, floor, stats.ratio(ours, floor)


def _floor_goals(res: Mapping[str, Any] | None) -> list[Goal]:
    ours, floor, r = floor_ratio(res)
    return [
        Goal(
            "floor",
            "Redis execution per uncontended pair <= 1.2x the data model's floor",
            f"floor {_n(floor, 1)} us",
            f"redlease {_n(ours, 1)} us: {_n(r, 2)}x",
            None if math.isnan(r) else r <= 1.2,
        )
    ]


def goals(results: Mapping[str, Any]) -> list[Goal]:
    """The goals of every curve the run has, in the curves' order."""
    c = results.get("curves", {})
    of = {"operator": _operator_goals, "fleet": _fleet_goals, "waiters": _waiter_goals,
          "quorum": _quorum_goals, "floor": _floor_goals}  # fmt: skip
    return [g for name, goals_of in of.items() if name in c for g in goals_of(c[name])]


TITLES = {
    "operator": "1. Operator refresh cycle against DistributedLocks",
    "fleet": "2. A fleet of sidecars renewing on one Redis",
    "waiters": "3. Waiters on one lock",
    "quorum": "4. RedLock sets of 3, 5 and 7 nodes",
    "floor": "5. Redis time per uncontended pair against the data model's floor",
}

HOW = {
    "operator": "bench/scale/operator.py: the CLI's `redlease operator` process (`--refresh 1`) "
    "against the tests' Kubernetes API emulator (KMock, in the harness process) and one "
    "redis-server, one in ten locks held. Seconds per refresh = window / (status reads / N), "
    "a status read being one `EVALSHA` of the status script (`INFO commandstats`); CPU is the "
    "operator process's; round trips per cycle from its `/metrics`; API requests from the "
    "emulator's log (KMock's, which here forgets each request once answered: its own log matching "
    "is quadratic). First pass: operator start to a status on every lock, given up after 180 s "
    "(60 s quick) with the statuses written by then; the steady-state window then measures what "
    "the operator does, at most 45 s.",
    "fleet": "bench/scale/fleet.py: the sidecar's own elector loop (renew, heartbeat and status "
    "read every 2 s retry period, TTL 15 s), each elector on its own lock with its own Redis "
    "client, at most 4 processes (250 electors each at 1,000). Per renewal: everything the "
    "fleet made Redis do (`INFO commandstats`, library checks `FUNCTION LIST ... WITHCODE` "
    "every 10 s per client included) divided by the renewals the electors report; CPU is "
    "`used_cpu_sys + used_cpu_user` of the main thread less the idle server's over as long.",
    "waiters": "bench/waiters.py (shared with `make bench`): N asyncio tasks or threads on one "
    "lock in a fresh process with one default redis-py client.",
    "quorum": "bench/scale/quorum.py: uncontended `acquire` calls on a `redlease.quorum.NodeSet` "
    "of local nodes, sizes interleaved in rounds; every node shares the 2 cores with the client.",
    "floor": "`bench.profile.floor_samples` (what `python -m bench.profile --floor` prints): "
    "`INFO commandstats` usec per acquire+release pair, interleaved repetitions, medians; the "
    "floor is the least a fenced lease in the data model does (7 calls in a Functions library); "
    "the contract floor adds what DESIGN.md's rules ask of every pair and the floor leaves out "
    "(the token rule's clock seed, the transitions count, a look for waiters at release).",
}


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---:|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


# A point table: (header, the point's field, decimals; None: an integer with thousands commas,
# "text": as it is). The first column names the point; a point that failed shows its error.
Columns = Sequence[tuple[str, str, "int | str | None"]]

OPERATOR_COLUMNS: Columns = (
    ("locks", "locks", None),
    ("s per refresh", "seconds_per_refresh", 2),
    ("locks per cycle", "locks_per_cycle", 0),
    ("operator CPU ms/lock", "cpu_ms_per_lock", 3),
    ("Redis us/lock", "redis_us_per_lock", 1),
    ("Redis round trips/cycle", "round_trips_per_cycle", 1),
    ("API requests/cycle", "api_requests_per_cycle", 1),
    ("RSS MB", "rss_mb", 0),
    ("peak RSS MB", "peak_rss_mb", 0),
    ("first status s", "first_status_s", 1),
    ("first pass s", "first_pass_s", 1),
    ("statuses written", "statuses_written", None),
)
FLEET_COLUMNS: Columns = (
    ("electors", "electors", None),
    ("processes", "processes", "text"),
    ("renewals/s", "renewals_per_s", 0),
    ("Redis exec us/renewal", "redis_exec_us_per_renewal", 1),
    ("commands/renewal", "redis_calls_per_renewal", 1),
    ("of which library check us", "library_check_us_per_renewal", 1),
    ("Redis CPU us/renewal", "redis_cpu_us_per_renewal", 1),
    ("CPU net of idle us", "redis_net_cpu_us_per_renewal", 1),
    ("clients", "clients", "text"),
)
QUORUM_COLUMNS: Columns = (
    ("client", "flavour", "text"),
    ("nodes", "nodes", "text"),
    ("acquires", "acquires", "text"),
    ("p50 ms", "p50_ms", 2),
    ("p99 ms", "p99_ms", 2),
    ("max ms", "max_ms", 2),
)


def _cell(point: Mapping[str, Any], key: str, digits: int | str | None) -> str:
    if digits is None:
        value = point.get(key, point.get("locks"))  # statuses written: every lock, before it
        return f"{value:,}"
    if digits == "text":
        return str(point[key])
    return _n(point[key], int(digits))


def _point_table(res: Mapping[str, Any], columns: Columns) -> list[str]:
    rows = []
    for p in res.get("points", []):
        first = _cell(p, columns[0][1], columns[0][2])
        if "error" in p:
            rows.append([first, p["error"], *[""] * (len(columns) - 2)])
        else:
            rows.append([first, *(_cell(p, key, d) for _h, key, d in columns[1:])])
    return _table([h for h, _k, _d in columns], rows)


def _floor_rows(res: Mapping[str, Any]) -> list[str]:
    _, floor, _ = floor_ratio(res)
    rows = []
    for name, values in res.get("exec_us", {}).items():
        med = stats.median(values)
        rows.append(
            [name, _n(med, 1), " ".join(_n(v, 1) for v in values), _n(stats.ratio(med, floor), 2)]
        )
    return _table(["pair", "Redis us (median)", "repetitions", "x floor"], rows)


def markdown(results: Mapping[str, Any], charts: Mapping[str, Path]) -> str:
    out = [
        "# Scale",
        "",
        "Generated by `make bench-scale` (`make bench-scale-quick` for fewer points) from "
        "`bench/scale.json`, which keeps every point; do not edit by hand.",
        "",
        run_line(results) + " Every redis-server is started by the run on loopback.",
        "",
        "## Goals at each curve's smallest and largest point",
        "",
        "| curve | goal | smallest point | largest point | met |",
        "|---|---|---|---|---|",
    ]
    for g in goals(results):
        met = "n/a" if g.met is None else ("yes" if g.met else "**no**")
        out.append(f"| {g.curve} | {g.goal} | {g.smallest} | {g.largest} | {met} |")
    render = {
        "operator": lambda res: _point_table(res, OPERATOR_COLUMNS),
        "fleet": lambda res: _point_table(res, FLEET_COLUMNS),
        "quorum": lambda res: _point_table(res, QUORUM_COLUMNS),
        "floor": _floor_rows,
    }
    for name, res in results.get("curves", {}).items():
        load = res.get("load_1min", [])
        every = [*load, *(x for p in res.get("points", []) for x in p.get("load_1min", []))]
        out += ["", f"## {TITLES[name]}", ""]
        if curves.loaded(every):
            out += [
                "**Measured on a loaded machine, preliminary** (1-minute load average up "
                f"to {max(every):.2f} during this curve, on 2 CPUs).",
                "",
            ]
        out += [HOW[name], ""]
        if "error" in res:
            out += [f"The curve failed: {res['error']}", ""]
        if name == "waiters":
            from bench import waiters

            out += waiters.markdown({"waiters": res})[4:]  # its table, without its heading
        else:
            out += render[name](res)
        loads = ", ".join(f"{x:.2f}" for x in load)
        out += ["", f"Load average (1 min) during the curve: {loads}; {res['duration_s']:.0f} s."]
        if name in charts:
            out += ["", f"![{TITLES[name]}]({charts[name].name})"]
    notes = Path(__file__).with_name("notes.md")
    if notes.exists():
        out += ["", notes.read_text().strip()]
    return "\n".join(out) + "\n"


def _xy(rows: Sequence[Mapping[str, Any]], x: str, y: Any) -> tuple[list[float], list[float]]:
    rows = sorted(rows, key=lambda r: r[x])
    return [float(r[x]) for r in rows], [float(y(r)) for r in rows]


def _panels(name: str, res: Mapping[str, Any]) -> list[Panel]:
    if name == "operator":
        p = _pts(res)
        return [
            Panel(
                "seconds per refresh of every lock",
                "DistributedLocks",
                "s",
                [("seconds per refresh", *_xy(p, "locks", lambda r: r["seconds_per_refresh"]))],
                goal=10.0,
            ),
            Panel(
                "cost per lock per refresh",
                "DistributedLocks",
                "operator CPU ms / lock",
                [
                    ("operator CPU", *_xy(p, "locks", lambda r: r["cpu_ms_per_lock"])),
                    (
                        "Redis exec (x 0.01 ms)",
                        *_xy(p, "locks", lambda r: r["redis_us_per_lock"] / 10),
                    ),
                ],
            ),
            Panel(
                "operator RSS",
                "DistributedLocks",
                "MB",
                [
                    ("RSS", *_xy(p, "locks", lambda r: r["rss_mb"])),
                    ("peak", *_xy(p, "locks", lambda r: r["peak_rss_mb"])),
                ],
                goal=300.0,
            ),
        ]
    if name == "fleet":
        p = _pts(res)
        return [
            Panel(
                "Redis time per renewal",
                "electors",
                "us",
                [
                    (
                        "execution (commandstats)",
                        *_xy(p, "electors", lambda r: r["redis_exec_us_per_renewal"]),
                    ),
                    (
                        "main-thread CPU, net of idle",
                        *_xy(p, "electors", lambda r: r["redis_net_cpu_us_per_renewal"]),
                    ),
                    (
                        "library check share",
                        *_xy(p, "electors", lambda r: r["library_check_us_per_renewal"]),
                    ),
                ],
            ),
        ]
    if name == "waiters":

        def by(f: str, pick: Any) -> tuple[list[float], list[float]]:
            return _xy(_ok(res.get(f, [])), "waiters", pick)

        flav = ("asyncio", "threads")
        return [
            Panel(
                "wake-up p99",
                "waiters",
                "ms",
                [(f, *by(f, lambda r: r["wakeup"]["p99_ms"])) for f in flav],
                goal=5.0,
                logy=True,
            ),
            Panel(
                "timeout overshoot p99",
                "waiters",
                "ms",
                [
                    (f"{f}, one among N", *by(f, lambda r: r["timeout_among"]["p99_ms"]))
                    for f in flav
                ]
                + [(f"{f}, N at once", *by(f, lambda r: r["timeout"]["p99_ms"])) for f in flav],
                goal=20.0,
                logy=True,
            ),
            Panel(
                "connections (peak)",
                "waiters",
                "connections",
                [(f, *by(f, lambda r: r["connections_peak"])) for f in flav],
                goal=5.0,
                logy=True,
            ),
        ]
    if name == "quorum":
        p = _pts(res)
        return [
            Panel(
                f"{f} acquire",
                "nodes",
                "ms",
                [
                    (
                        q,
                        *_xy(
                            [r for r in p if r["flavour"] == f],
                            "nodes",
                            lambda r, q=q: r[f"{q}_ms"],
                        ),
                    )
                    for q in ("p50", "p99")
                ],
                logx=False,
            )
            for f in ("sync", "asyncio")
        ]
    ex = res.get("exec_us", {})
    return [
        Panel(
            "Redis us per pair, every repetition",
            "repetition",
            "us",
            [(k, [float(i + 1) for i in range(len(v))], list(v)) for k, v in ex.items()],
            logx=False,
        ),
    ]


def charts(results: Mapping[str, Any], where: Path) -> dict[str, Path]:
    """One PNG per curve that has data (docs/scale-<curve>.png)."""
    out = {}
    for name, res in results.get("curves", {}).items():
        path = where / f"scale-{name}.png"
        if lines(path, TITLES[name], _panels(name, res)):
            out[name] = path
    return out
