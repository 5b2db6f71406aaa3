"""Dapr's own JavaScript SDK (``@dapr/dapr``, DaprClient over HTTP) against a real sidecar on a
real redis-server: an app written for Dapr's lock API works unchanged (tests/sidecar/dapr_js).

The SDK is installed once with ``npm ci`` into ``.venv/node-dapr`` (pinned by the committed
package-lock.json; reinstalled only when it changes); without node or npm, or when the install
cannot be done, the test skips with one line."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, Sidecar

FIXTURE = Path(__file__).parent / "dapr_js"
INSTALL = ROOT / ".venv" / "node-dapr"
TOKEN = "js-sdk-token-0123456789abcdef"


def sdk() -> Path:
    """``node_modules`` holding the pinned SDK (installed here once per lock file); skips the
    test when node or npm is missing or npm cannot install."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("no node/npm on this machine: the Dapr JavaScript SDK check is skipped")
    lock = (FIXTURE / "package-lock.json").read_bytes()
    stamp = hashlib.sha256(lock + (FIXTURE / "package.json").read_bytes()).hexdigest()
    INSTALL.mkdir(parents=True, exist_ok=True)
    with open(INSTALL / ".lock", "w") as guard:  # one installer at a time (parallel tests)
        fcntl.flock(guard, fcntl.LOCK_EX)
        done = INSTALL / ".installed"
        if not (done.exists() and done.read_text() == stamp):
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(FIXTURE / name, INSTALL / name)
            out = subprocess.run(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=INSTALL, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            if out.returncode != 0:
                why = (out.stderr.strip().splitlines() or ["no output"])[-1]
                pytest.skip(f"npm could not install @dapr/dapr: {why}")
            done.write_text(stamp)
    return INSTALL / "node_modules"


def run_check(port: int, store: str, token: str = "") -> dict[str, object]:
    modules = sdk()
    node = shutil.which("node")
    assert node is not None
    environ = {**os.environ, "NODE_PATH": str(modules)}
    environ.pop("DAPR_API_TOKEN", None)
    out = subprocess.run(
        [node, str(FIXTURE / "check.js"), str(port), store, token],
        capture_output=True, text=True, timeout=120, env=environ, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_dapr_js_sdk_locks_and_unlocks(
    sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    extra = ["--api-locks", "apps/", "--dapr-store", "lockstore", "--api-token-file", str(token)]
    sc = sidecars("pod-js", lock_name, [redis_server.url], extra=extra).wait_up()
    got = run_check(sc.port, "lockstore", TOKEN)
    assert got["locked"] == {"success": True}
    assert got["contended"] == {"success": False}
    assert got["unlockedByOther"] == {"status": 2}  # LockStatus.LockBelongsToOthers
    assert got["unlocked"] == {"status": 0}  # LockStatus.Success
    assert got["unlockedAgain"] == {"status": 1}  # LockStatus.LockDoesNotExist
    assert got["held"] == {"success": True}
    other = got["otherStore"]
    assert isinstance(other, dict) and other["status"] == 400
    assert json.loads(other["error_msg"])["errorCode"] == "ERR_LOCK_STORE_NOT_FOUND"
    with redis.Redis.from_url(redis_server.url) as client:  # the prefix + the resource id
        lease = LockKeys.for_name("apps/js-held").lease
        assert client.hget(lease, "holder") == b"pod-js"
        assert 100_000 < client.pttl(lease) <= 120_000
