"""What every benchmark run records about itself, and strict JSON in and out (NaN <-> null).

Shared by ``python -m bench`` and ``python -m bench.scale``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any


def versions() -> dict[str, str]:
    """The installed versions of redlease and of the peers the benchmark compares."""
    out = {}
    for dist in ("redlease", "redis", "hiredis", "python-redis-lock", "pottery", "aioredlock"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def environment() -> dict[str, Any]:
    """The machine, the interpreter, the server and the load average before the run."""
    from redlease.devtools.redisbinary import server_version

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "redis_server": ".".join(map(str, server_version())),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "versions": versions(),
    }


def clean(obj: Any) -> Any:
    """NaN → None so results.json stays strict JSON."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    return obj


def unclean(obj: Any) -> Any:
    """None → NaN when re-reading results (``--render-only``); flags and reasons stay."""
    if obj is None:
        return math.nan
    if isinstance(obj, dict):
        return {k: (v if k in ("skipped", "available") else unclean(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unclean(v) for v in obj]
    return obj


def start(mode: str, plan: Any) -> tuple[dict[str, Any], Callable[[str], None]]:
    """A run's results header (mode, start time, plan, environment) and its progress logger
    (seconds since the start on every line)."""
    t0 = time.monotonic()
    results = {
        "mode": mode,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "plan": plan.__dict__,
        "environment": environment(),
        "t0": t0,
    }

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    return results, log


def finish(results: dict[str, Any]) -> None:
    """Stamp the load average after the run and its duration."""
    results["environment"]["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results["duration_s"] = time.monotonic() - results.pop("t0")


def run_line(results: dict[str, Any]) -> str:
    """The report's one-line account of the run and the machine."""
    env = results["environment"]
    return (
        f"Run: {results['mode']} mode, {results['started']}, {results['duration_s']:.0f} s; "
        f"{env['cpus']} CPUs, load average {env['load_before']} before and "
        f"{env['load_after']} after; redis-server {env['redis_server']}, Python {env['python']}."
    )


def arguments(
    prog: str,
    doc: str | None,
    names: tuple[str, ...],
    outputs: dict[str, Path],
    argv: list[str] | None,
) -> tuple[argparse.Namespace, list[str]]:
    """The command line both benchmark runners share: ``--quick``, ``--only`` (a comma-separated
    subset of ``names``, in their order), ``--render-only`` and one path option per entry of
    ``outputs`` (``json``, ``markdown``, ...: its default). Returns the arguments and the
    selected names; an unknown name is a usage error naming it."""
    ap = argparse.ArgumentParser(prog=prog, description=doc)
    ap.add_argument("--quick", action="store_true", help="short run, fewer points")
    ap.add_argument("--only", default=",".join(names), help="comma-separated subset")
    for option, default in outputs.items():
        ap.add_argument(f"--{option.replace('_', '-')}", type=Path, default=default)
    ap.add_argument("--render-only", action="store_true", help="re-render from the JSON")
    args = ap.parse_args(argv)
    asked = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = asked - set(names)
    if unknown:
        ap.error(f"--only: unknown name(s) {', '.join(sorted(unknown))}")
    return args, [n for n in names if n in asked]


def collect(
    args: argparse.Namespace,
    plans: dict[str, Any],
    measure: Callable[[str, Any, Callable[[str], None]], dict[str, Any]],
) -> dict[str, Any]:
    """The results to render: re-read from ``args.json`` with ``--render-only``; else a new run
    (``measure(mode, plan, log)`` fills in the scenarios), stamped and written to ``args.json``."""
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    if args.render_only:
        return unclean(json.loads(args.json.read_text()))  # type: ignore[no-any-return]
    mode = "quick" if args.quick else "full"
    results, log = start(mode, plans[mode])
    results.update(measure(mode, plans[mode], log))
    finish(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(clean(results), indent=1) + "\n")
    return results


def proc_usage(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds user+system) of ``pid`` from /proc."""
    rss_kb = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return rss_kb / 1024, cpu
