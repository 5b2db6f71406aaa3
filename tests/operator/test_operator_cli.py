"""`redlease operator` flags: validated into OperatorConfig; mistakes are one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import aiohttp
import pytest

from redlease import cli
from redlease.cli.login import this_pod
from redlease.cli.operator import operator_config
from redlease.devtools.localredis import free_port
from redlease.operator import metrics, ports


def config(*argv: str) -> object:
    return operator_config(cli.parse_args(["operator", *argv]), this_pod())


def test_flags_to_config(monkeypatch: pytest.MonkeyPatch) -> None:
    c = config("-n", "a", "--namespace", "b", "--refresh", "2", "--metrics", "127.0.0.1:9090")
    assert c.namespaces == ("a", "b") and not c.clusterwide  # type: ignore[attr-defined]
    assert c.refresh == 2.0 and c.metrics == ("127.0.0.1", 9090)  # type: ignore[attr-defined]
    assert config("--all-namespaces").clusterwide  # type: ignore[attr-defined]
    monkeypatch.setenv("REDLEASE_NAMESPACE", "x,y")
    monkeypatch.setenv("REDLEASE_REFRESH", "7")
    c = config()
    assert c.namespaces == ("x", "y") and c.refresh == 7.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["operator"], "--namespace"),
        (["operator", "-A", "--refresh", "0"], "--refresh"),
        (["operator", "-A", "--refresh", "soon"], "--refresh"),
        (["operator", "-A", "--liveness", "tcp://x"], "--liveness"),
        (["operator", "-A", "--metrics", "9090"], "--metrics"),
        (["operator", "-A", "-n", "x"], "--namespace"),
    ],
)
def test_bad_flags_exit_2_with_one_line(argv: list[str], flag: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "redlease", *argv], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in result.stderr


async def test_metrics_endpoint() -> None:
    port = free_port()
    status = {"phase": "Held", "healthyNodes": 2, "lastFencingToken": 7}

    def text() -> str:
        return metrics.render(cycles=3, locks=1, round_trips=9, statuses=[("apps", "q", status)])

    server = await ports.serve_metrics("127.0.0.1", port, text)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            body = await resp.text()
        assert resp.status == 200
        assert "redlease_operator_refresh_cycles_total 3" in body
        assert 'redlease_lock_phase{namespace="apps",name="q",phase="Held"} 1' in body
        assert 'redlease_lock_phase{namespace="apps",name="q",phase="Free"} 0' in body
        assert 'redlease_lock_fencing_token{namespace="apps",name="q"} 7' in body
    finally:
        await server.close()
