"""Processes that hold Redis credentials are not dumpable: another process of the same UID
(the command `redlease run` starts, a neighbour in a pod sharing its process namespace) cannot
read their ``/proc/PID/environ``. Real processes, all as one unprivileged UID."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.sidecarprocs import ROOT, Sidecar, as_one_user, env, read_environ, wait_until

SECRET = "dump-s3cret"

# the command `redlease run` starts: reads its parent's environ and lists its own credentials.
# What it learns goes to its stdout, which only it writes (the runner logs to stderr: a line
# there may fall in the middle of cat's message). A read that ends with neither bytes nor an
# error proves nothing (seen once in a full run): it is tried again, up to 5 times.
CHILD = (
    "PATH=/usr/bin:/bin; for i in 1 2 3 4 5; do "
    'err=$(cat /proc/$PPID/environ 2>&1 >/dev/null) || { echo "refused: $err"; break; }; '
    "out=$(cat /proc/$PPID/environ | tr '\\0' ' '); "
    '[ -n "$out" ] && { echo "$out"; break; }; echo \'empty read\'; sleep 0.1; done; '
    "env | grep -c '^REDLEASE_\\(PASSWORD\\|REDIS\\)='"
)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer(password=SECRET) as started:
        yield started


def test_run_child_cannot_read_the_runner_environ(server: RedisServer) -> None:
    url = f"redis://127.0.0.1:{server.port}/0"
    argv = [sys.executable, "-m", "redlease", "run", "--lock", "undump-run", "--ttl", "5",
            "--", "/bin/sh", "-c", CHILD]  # fmt: skip
    out = subprocess.run(
        [*as_one_user(), *argv], env=env(REDLEASE_PASSWORD=SECRET, REDLEASE_REDIS=url),
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr  # grep counted no credential in the child's env
    lines = out.stdout.splitlines()
    assert lines[-1] == "0" and SECRET not in out.stdout + out.stderr, out.stdout
    assert lines[0].startswith("refused: cat: /proc/"), out.stdout
    assert "Permission denied" in lines[0], out.stdout


def test_neighbour_cannot_read_the_sidecar_environ(server: RedisServer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)  # the sidecar's UID writes here
    url = f"redis://127.0.0.1:{server.port}/0"
    sidecar = Sidecar(
        "undump", "undump-sc", [url], state_dir=state, environ=env(REDLEASE_PASSWORD=SECRET),
        extra=["--probes", f"127.0.0.1:{free_port()}"],  # a fork of the sidecar serves them
    )  # fmt: skip
    sidecar.args[:0] = as_one_user()
    # a process of the same UID with the same environment that is dumpable: readable
    control = subprocess.Popen(
        [*as_one_user(), sys.executable, "-c", "import sys; sys.stdin.read()"],
        env=env(REDLEASE_PASSWORD=SECRET), stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        sidecar.start().wait_up()
        wait_until(sidecar.is_leader, 30)  # it authenticated with the password
        assert sidecar.proc is not None
        assert read_environ(sidecar.proc.pid, SECRET)["error"] == "PermissionError"
        probes = sidecar.children()
        assert len(probes) == 1
        assert read_environ(probes[0], SECRET)["error"] == "PermissionError"
        assert read_environ(control.pid, SECRET)["found"] is True
    finally:
        sidecar.stop()
        control.kill()
        control.wait(10)
