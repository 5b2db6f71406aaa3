"""Processes that hold Redis credentials are not dumpable: another process of the same UID
(the command `redlease run` starts, a neighbour in a pod sharing its process namespace) cannot
read their ``/proc/PID/environ``. Real processes, all as one unprivileged UID."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from redlease.devtools.localredis import RedisServer
from tests.sidecar.procs import ROOT, Sidecar, env, wait_until

SECRET = "dump-s3cret"
SIDECAR_UID = 10001  # the chart's runAsUser

# reads /proc/PID/environ (PID: argv[1]); prints what happened as JSON
READER = f"""
import json, sys
try:
    text = open(f"/proc/{{sys.argv[1]}}/environ", "rb").read().decode(errors="replace")
    print(json.dumps({{"read": True, "secret": {SECRET!r} in text}}))
except OSError as exc:
    print(json.dumps({{"read": False, "error": type(exc).__name__}}))
"""
# the command `redlease run` starts: reads its parent's environ and lists its own credentials
CHILD = "cat /proc/$PPID/environ; echo; env | grep -c '^REDLEASE_\\(PASSWORD\\|REDIS\\)='"


def as_one_user() -> list[str]:
    """The prefix that runs a command as the sidecars' UID without CAP_SYS_PTRACE (root reads
    every process's environ). Root keeps only CAP_DAC_READ_SEARCH, to reach this interpreter
    wherever it is installed."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if sys.platform != "linux" or setpriv is None:
        pytest.skip("running as root, and no setpriv to run as an unprivileged UID")
    return [
        setpriv, f"--reuid={SIDECAR_UID}", f"--regid={SIDECAR_UID}", "--clear-groups",
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--",
    ]  # fmt: skip


def read_environ(pid: int) -> dict[str, object]:
    out = subprocess.run(
        [*as_one_user(), sys.executable, "-c", READER, str(pid)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def server() -> RedisServer:
    with RedisServer(password=SECRET) as started:
        yield started


def test_run_child_cannot_read_the_runner_environ(server: RedisServer) -> None:
    url = f"redis://127.0.0.1:{server.port}/0"
    argv = [sys.executable, "-m", "redlease", "run", "--lock", "undump-run", "--ttl", "5",
            "--", "sh", "-c", CHILD]  # fmt: skip
    out = subprocess.run(
        [*as_one_user(), *argv], env=env(REDLEASE_PASSWORD=SECRET, REDLEASE_REDIS=url),
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr  # grep counted no credential in the child's env
    assert out.stdout.split() == ["0"] and SECRET not in out.stdout + out.stderr
    assert "cat: /proc/" in out.stderr and "Permission denied" in out.stderr


def test_neighbour_cannot_read_the_sidecar_environ(server: RedisServer, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)  # the sidecar's UID writes here
    url = f"redis://127.0.0.1:{server.port}/0"
    sidecar = Sidecar(
        "undump", "undump-sc", [url], state_dir=state, environ=env(REDLEASE_PASSWORD=SECRET)
    )
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
        assert read_environ(sidecar.proc.pid)["error"] == "PermissionError"
        assert read_environ(control.pid)["secret"] is True
    finally:
        sidecar.stop()
        control.kill()
        control.wait(10)
