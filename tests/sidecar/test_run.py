"""`redlease run`: COMMAND runs only while leading, is stopped on loss, passes its exit code."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from redlease.devtools.localredis import RedisServer
from tests.sidecar.procs import ROOT, env, wait_until

TIMING = ["--ttl", "1.5", "--renew-deadline", "1.0", "--retry-period", "0.1"]


def run(lock: str, url: str, *cmd: str, identity: str = "r") -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "redlease", "run", "--lock", lock, "--redis", url,
            "--identity", identity, *TIMING, "--", *cmd]  # fmt: skip
    return subprocess.Popen(
        argv, env=env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_exit_code_and_fencing_token_are_passed(redis_server: RedisServer, tmp_path: Path) -> None:
    out = tmp_path / "token"
    proc = run(
        "runexit", redis_server.url, "sh", "-c", f'echo "$REDLEASE_FENCING_TOKEN" > {out}; exit 7'
    )
    assert proc.wait(30) == 7
    assert int(out.read_text()) >= 1
    # the lease was released on exit: the lock is free at once
    assert redis_server.client().exists("redlease:{runexit}") == 0


INTERVAL = """
import sys, time
start = time.time(); time.sleep(0.4)
open(sys.argv[1], "a").write(f"{start} {time.time()}\\n")
"""


@pytest.mark.slow
def test_two_runners_never_overlap(redis_server: RedisServer, tmp_path: Path) -> None:
    log = tmp_path / "intervals"
    procs = [run("runmutex", redis_server.url, sys.executable, "-c", INTERVAL, str(log),
                 identity=f"r{i}") for i in range(3)]  # fmt: skip
    assert [p.wait(30) for p in procs] == [0, 0, 0]
    spans = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(spans) == 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"commands overlapped: {spans}"


TRAP = """
import signal, sys, time, pathlib
def term(*_):
    pathlib.Path(sys.argv[1]).write_text("got SIGTERM")
    sys.exit(42)
signal.signal(signal.SIGTERM, term)
pathlib.Path(sys.argv[2]).write_text("running")
while True:
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_command_is_stopped_on_loss(redis_server: RedisServer, tmp_path: Path) -> None:
    marker, running = tmp_path / "term", tmp_path / "running"
    proc = run("runloss", redis_server.url, sys.executable, "-c", TRAP, str(marker), str(running))
    wait_until(running.exists, timeout=20)
    # someone else's action ends our lease (an admin force-release): the next renewal is refused
    # (how soon is the renewal period's business and measured by benchmarks, not asserted here)
    redis_server.client().delete("redlease:{runloss}")
    assert proc.wait(10) == 42
    assert marker.read_text() == "got SIGTERM"
    assert "lease lost: stopping the command" in proc.stderr.read()  # type: ignore[union-attr]


@pytest.mark.slow
def test_sigterm_is_forwarded_and_sigkill_follows_the_grace(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    running = tmp_path / "running"
    stubborn = (
        "import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"pathlib.Path({str(running)!r}).write_text('x'); time.sleep(60)"
    )
    proc = run("runterm", redis_server.url, sys.executable, "-c", stubborn)
    wait_until(running.exists, timeout=20)
    proc.terminate()
    assert proc.wait(10) == 128 + 9  # ignored SIGTERM, killed after the grace period
    assert redis_server.client().exists("redlease:{runterm}") == 0


def test_command_gets_no_redis_credentials(tmp_path: Path) -> None:
    with RedisServer(password="run-s3cret") as server:
        probe = "import os, json; print(json.dumps({k: v for k, v in os.environ.items() " \
            "if k.startswith('REDLEASE_')}))"  # fmt: skip
        url = f"redis://127.0.0.1:{server.port}/0"
        base = [sys.executable, "-m", "redlease", "run", "--lock", "creds", *TIMING]
        for keep, expect in (([], False), (["--keep-credentials-env"], True)):
            out = subprocess.run(
                [*base, *keep, "--", sys.executable, "-c", probe],
                env=env(REDLEASE_PASSWORD="run-s3cret", REDLEASE_REDIS=url),
                cwd=ROOT, capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
            seen = json.loads(out.stdout)
            assert "REDLEASE_FENCING_TOKEN" in seen
            assert ("REDLEASE_PASSWORD" in seen) is expect and ("REDLEASE_REDIS" in seen) is expect
            assert "run-s3cret" not in out.stderr
