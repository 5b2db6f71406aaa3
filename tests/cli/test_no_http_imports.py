"""Commands that serve no HTTP run without aiohttp (issue 39: a ``redlease run`` or ``status``
in a CronJob or a shell should not pay for the HTTP stack's import and memory). Each runs
here with ``import aiohttp`` made to fail, and must still do its job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, env

# every import of aiohttp raises ImportError; the command then runs as ``python -m redlease``
_BLOCKED = "import sys, runpy; sys.modules['aiohttp'] = None; runpy.run_module('redlease', run_name='__main__')"  # noqa: E501


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED, *args],
        capture_output=True, text=True, timeout=60, env=env(), cwd=ROOT,
    )  # fmt: skip


def test_lock_commands_run_without_aiohttp(redis_server: RedisServer, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}"
    marker = tmp_path / "ran"
    ran = _run("run", "--lock", "cron", "--redis", url, "--", "touch", str(marker))
    assert ran.returncode == 0, ran.stderr
    assert marker.exists()
    status = _run("status", "--lock", "cron", "--redis", url, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["lock"] == "cron"
    retired = _run("retire", "--lock", "cron", "--redis", url, "--yes")
    assert retired.returncode == 0, retired.stderr
    state = tmp_path / "cron.json"
    state.write_text("{}")
    waited = _run("wait", "--state-file", str(state), "--timeout", "0.1s")
    assert waited.returncode == 1, waited.stderr  # not leading: --timeout's exit status
    assert "aiohttp" not in waited.stderr


@pytest.mark.parametrize(
    ("command", "manifest"),
    [("validate", "distributedlock-samples.yaml"), ("inject", "injected-deployment.yaml")],
)
def test_manifest_commands_run_without_aiohttp(command: str, manifest: str) -> None:
    done = _run(command, "-f", str(ROOT / "examples" / manifest))
    assert done.returncode == 0, done.stderr
    assert "aiohttp" not in done.stderr
