"""`redlease operator` as a real process: kubeconfig login, status, liveness, metrics, SIGTERM,
its log (kopf's lines included) as JSON lines."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import kmock
import pytest

from redlease.devtools.kubeemulator import (
    NAMESPACE,
    Cluster,
    Emulator,
    declare,
    kubeconfig,
    until,
    watching,
)
from redlease.devtools.localredis import RedisServer, free_port


@pytest.fixture
async def api() -> AsyncIterator[tuple[Emulator, str]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        yield emulator, str(server.url).rstrip("/")


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.text()


async def test_operator_process(
    api: tuple[Emulator, str], redis_server: RedisServer, tmp_path: Path
) -> None:
    emulator, url = api
    config = kubeconfig(tmp_path / "kubeconfig", url)
    health, metrics = free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(config), "REDLEASE_REFRESH": "0.3"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "redlease", "operator", "--namespace", NAMESPACE,
        "--liveness", f"http://127.0.0.1:{health}/healthz",
        "--metrics", f"127.0.0.1:{metrics}",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        # a cold start of the operator process beside a full suite can take longer than 20 s
        await until(lambda: watching(emulator) or proc.returncode is not None, 60, what="watch")
        assert proc.returncode is None
        cluster = Cluster(emulator, None, url)  # type: ignore[arg-type]
        await cluster.create("proc", {"keys": ["p"], "nodes": [{"url": redis_server.url}]})
        await until(lambda: cluster.status("proc").get("phase") == "Free", what="Free")

        async def healthy() -> bool:
            try:
                return (await get(f"http://127.0.0.1:{health}/healthz"))[0] == 200
            except aiohttp.ClientError:
                return False

        await until(healthy, what="liveness 200")
        status, body = await get(f"http://127.0.0.1:{metrics}/metrics")
        assert status == 200 and 'redlease_lock_phase{namespace="apps",name="proc"' in body
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            raw, _ = await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            raw, _ = await proc.communicate()
    out = raw.decode(errors="replace")
    assert proc.returncode == 0, out
    assert "test-token" not in out
    # one log format: kopf's lines are JSON like redlease's (--log-format auto, not a terminal)
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    kopf_lines = [r for r in records if "Initial authentication" in str(r.get("event"))]
    assert kopf_lines and kopf_lines[0]["level"] == "info" and "timestamp" in kopf_lines[0]
