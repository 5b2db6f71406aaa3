"""Every URL kind in every command: `redlease status`, `run`, `sidecar` and the operator (a
DistributedLock) on one Redis, a unix socket, TLS (a CA made for the test; skipped with one line
when the server binary cannot do TLS), a Sentinel-managed master (a real Sentinel), and a 3-node
RedLock set; a node set the rules refuse gets one line naming the flag."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from redlease.devtools.kubeemulator import Cluster, until
from redlease.devtools.localredis import RedisServer, TlsFiles
from redlease.devtools.localsentinel import SentinelServer
from redlease.devtools.sidecarprocs import ROOT, Sidecar, env
from redlease.devtools.tlsprobe import tls_unsupported

TIMING = ["--ttl", "3", "--renew-deadline", "2", "--retry-period", "0.2"]


@dataclass
class Kind:
    name: str
    urls: list[str]  # for the command line
    total: int  # nodes the view counts


def redlease(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redlease", *args],
        capture_output=True,
        text=True,
        env=env(),
        cwd=ROOT,
        timeout=timeout,
    )


def redis_flags(urls: list[str]) -> list[str]:
    return [arg for url in urls for arg in ("--redis", url)]


@pytest.fixture(params=["single", "unix", "tls", "sentinel", "redlock-3"])
def kind(request: pytest.FixtureRequest) -> Iterator[Kind]:
    started: list[RedisServer] = []
    sock_dir = Path(tempfile.mkdtemp(prefix="redlease-sock-"))
    try:
        if request.param == "tls":
            why = tls_unsupported()
            if why:
                pytest.skip(why)
            started.append(RedisServer(tls=TlsFiles.make(sock_dir)).start())
            tls = started[0].tls
            assert tls is not None
            url = f"rediss://127.0.0.1:{started[0].tls_port}/0?ssl_ca_certs={tls.ca}"
            yield Kind("tls", [url], 1)
        elif request.param == "single":
            started.append(RedisServer().start())
            yield Kind("single", [started[0].url], 1)
        elif request.param == "unix":
            sock = sock_dir / "redis.sock"
            started.append(RedisServer(extra_args=["--unixsocket", str(sock)]).start())
            yield Kind("unix", [f"unix://{sock}"], 1)
        elif request.param == "sentinel":
            master = RedisServer().start()
            sentinel = SentinelServer(master_port=master.port).start()
            started += [master, sentinel]
            yield Kind("sentinel", [sentinel.url], 1)
        else:
            started += [RedisServer().start() for _ in range(3)]
            yield Kind("redlock-3", [s.url for s in started], 3)
    finally:
        for s in reversed(started):
            s.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.mark.slow
async def test_every_command_takes_every_url_kind(cluster: Cluster, kind: Kind) -> None:
    lock = f"kinds-{kind.name}-{uuid.uuid4().hex[:6]}"
    flags = ["--lock", lock, *redis_flags(kind.urls)]

    status = await asyncio.to_thread(redlease, "status", *flags, "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["holder"] is None and doc["nodes"]["total"] == kind.total
    assert doc["nodes"]["healthy"] == kind.total

    code = "import os; print('token', os.environ['REDLEASE_FENCING_TOKEN'])"
    run = await asyncio.to_thread(
        redlease, "run", *flags, *TIMING, "--", sys.executable, "-c", code
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith("token ")

    await cluster.create(lock, {"keys": [lock], "nodes": [{"url": u} for u in kind.urls]})
    sc = Sidecar("pod-0", lock, kind.urls, ttl=3, renew_deadline=2, retry_period=0.2).start()
    try:
        await asyncio.to_thread(sc.wait_up)

        def led_and_read() -> dict[str, Any] | None:
            doc = sc.status()  # leading, and the observer's first read is in
            return doc if doc and doc["leader"] and doc["nodes"]["healthy"] else None

        doc = await until(lambda: asyncio.to_thread(led_and_read))
        assert doc["nodes"] == {"total": kind.total, "healthy": kind.total,
                                "quorum": kind.total // 2 + 1}  # fmt: skip
        held: dict[str, Any] = await until(
            lambda: (st := cluster.status(lock)).get("holder") == "pod-0" and st, what="Held"
        )
        assert held["phase"] == "Held" and held["fencingToken"] == doc["fencing_token"]
        assert held["totalNodes"] == kind.total
    finally:
        sc.stop()


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--redis", "redis://a:1", "--redis", "redis://b:1"], "--redis"),  # 2 nodes
        (["--redis", "http://a:1"], "--redis"),
        (["--redis", "redis://a:1/0?password=hunter2"], "--redis"),
        (["--redis", "redis+sentinel://a:notaport/m"], "--redis"),
        (["--redis", "redis+sentinel://a:26379"], "--redis"),  # no service
        ([*(f"--redis=redis://{h}:1" for h in "abc"), "--quorum", "1"], "--quorum"),
        (["--redis", "redis+sentinel://a:26379/m", "--cluster"], "--redis"),
    ],
)
def test_refused_node_sets_get_one_line(args: list[str], flag: str) -> None:
    for command in ("status", "run"):
        extra = ["--", "true"] if command == "run" else []
        out = redlease(command, "--lock", "x", *args, *extra, timeout=30)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"redlease: error: {flag}"), lines
        assert "hunter2" not in out.stderr and "Traceback" not in out.stderr
