"""`redlease status`: where it reads the lock from when both a Redis and a sidecar are named."""

from __future__ import annotations

import json
import subprocess
import sys

import redlease
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, env


def test_redis_given_wins_over_a_sidecar_address_from_the_environment(
    redis_server: RedisServer,
) -> None:
    """A sidecar's container carries REDLEASE_HTTP for its own port: `redlease status --redis`
    run there reads Redis, not a sidecar (nothing listens on port 9 here)."""
    lock = redlease.Lock(redis_server.client(), "orders", ttl=30, identity="pod-a")
    lock.acquire()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "redlease",
            "status",
            "--lock",
            "orders",
            "--json",
            "--redis",
            f"redis://127.0.0.1:{redis_server.port}/0",
        ],
        env={**env(), "REDLEASE_HTTP": "127.0.0.1:9"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["holder"] == "pod-a"
    lock.release()
