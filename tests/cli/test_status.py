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


def test_holders_lists_every_holder_of_a_semaphore(redis_server: RedisServer) -> None:
    """``--holders N``: a semaphore's view, every holder with its token, for JSON and people."""
    slots = [
        redlease.Semaphore(redis_server.client(), "pool", limit=2, ttl=30, identity=f"pod-{i}")
        for i in range(2)
    ]
    leases = [s.acquire() for s in slots]
    base = [sys.executable, "-m", "redlease", "status", "--lock", "pool", "--holders", "2",
            "--redis", f"redis://127.0.0.1:{redis_server.port}/0"]  # fmt: skip

    def run(*more: str) -> str:
        proc = subprocess.run([*base, *more], env=env(), cwd=ROOT, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    doc = json.loads(run("--json"))
    assert doc["holders_limit"] == 2
    listed = [(h["holder"], h["fencing_token"]) for h in doc["holders"]]
    assert listed == [(f"pod-{i}", lease.fencing_token) for i, lease in enumerate(leases)]
    assert all(0 < h["expires_in_ms"] <= 30_000 for h in doc["holders"])
    text = run()
    assert "holders:" in text and "2 of 2: pod-0 (token" in text and "pod-1 (token" in text
    for s in slots:
        s.release()
