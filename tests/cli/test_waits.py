"""Every wait says what it waits for and why it cannot see it (once, then it retries), and the
small habits of a command line: a reader that leaves (``| head``), a bare ``HOST:PORT`` where
a Redis URL goes, a lock name never used. Real ``python -m redlease`` processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import redlease
from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.sidecarprocs import ROOT, env


def redlease_cmd(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "redlease", *argv], env=env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_wait_on_a_sidecar_that_does_not_answer_says_why_once() -> None:
    port = free_port()
    proc = redlease_cmd("wait", "--http", f"127.0.0.1:{port}", "--timeout", "1.5s",
                        "--interval", "100ms")  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0] == (f"redlease: waiting until http://127.0.0.1:{port}/status says this pod "
                        "leads (timeout 1.5s)")  # fmt: skip
    why = [line for line in lines if "cannot read" in line]
    assert len(why) == 1 and "connection refused" in why[0] and "retrying" in why[0], lines
    assert "connection refused" in lines[-1]  # the give-up line says it too


def test_wait_on_a_missing_state_dir_says_so_once(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    proc = redlease_cmd("wait", "--state-dir", str(missing), "--lock", "orders", "--timeout",
                        "1s", "--interval", "100ms")  # fmt: skip
    assert proc.returncode == 1
    why = [line for line in proc.stderr.splitlines() if "cannot read" in line]
    assert len(why) == 1 and f"directory {missing} does not exist" in why[0], proc.stderr
    proc = redlease_cmd("wait", "--state-dir", str(tmp_path), "--lock", "orders", "--timeout",
                        "0.5s")  # fmt: skip
    assert "no such file yet" in proc.stderr


def test_status_of_a_sidecar_that_does_not_answer_gives_the_reason() -> None:
    port = free_port()
    proc = redlease_cmd("status", "--http", f"http://127.0.0.1:{port}/status")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"redlease: cannot read http://127.0.0.1:{port}/status: "
                                   "connection refused (is the sidecar running, and on this "
                                   "address?)")  # fmt: skip


def test_a_reader_that_leaves_ends_status_quietly(redis_server: RedisServer) -> None:
    """`redlease status ... | head`: no BrokenPipeError traceback; the exit status of a
    program ended by SIGPIPE (141)."""
    for more in ([], ["--json"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "redlease", "status", "--lock", "x", "--redis",
             redis_server.url, *more],
            env=env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before anything is written
        err = proc.stderr.read()
        assert proc.wait(60) == 141 and err == "", err


def test_status_says_when_a_lock_name_was_never_used(redis_server: RedisServer) -> None:
    """A misspelt name reads "never used", not an ordinary "(free)"; a lock that was used and
    is free now does not."""
    lock = redlease.Lock(redis_server.client(), "orders", ttl=30, identity="pod-a")
    lock.acquire()
    lock.release()
    typo = redlease_cmd("status", "--lock", "ordrs", "--redis", redis_server.url)
    assert typo.returncode == 0 and "never used" in typo.stdout, typo.stdout
    doc = json.loads(redlease_cmd("status", "--lock", "ordrs", "--redis", redis_server.url,
                                  "--json").stdout)  # fmt: skip
    assert doc["never_used"] is True and doc["holder"] is None
    used = redlease_cmd("status", "--lock", "orders", "--redis", redis_server.url)
    assert used.returncode == 0 and "never used" not in used.stdout and "(free)" in used.stdout
    doc = json.loads(redlease_cmd("status", "--lock", "orders", "--redis", redis_server.url,
                                  "--json").stdout)  # fmt: skip
    assert "never_used" not in doc
