"""`make demo` as a newcomer runs it: a real redis-server, three sidecars, two failovers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_runs_to_the_end() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "redlease", "demo"],
        capture_output=True, text=True, env=env, timeout=110, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "SIGTERM" in out and "SIGKILL" in out
