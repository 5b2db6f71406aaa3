"""`redlease run`: COMMAND runs only while leading, is stopped on loss, passes its exit code."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import redlease
from redlease.cli.runspec import LEASE_LOST, NOT_ACQUIRED
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, env, wait_until

TIMING = ["--ttl", "1.5", "--renew-deadline", "1.0", "--retry-period", "0.1"]


def run(
    lock: str, url: str, *cmd: str, identity: str = "r", flags: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "redlease", "run", "--lock", lock, "--redis", url,
            "--identity", identity, *TIMING, *flags, "--", *cmd]  # fmt: skip
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
    assert proc.wait(10) == LEASE_LOST  # its own code, whatever COMMAND exited with (42)
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


def held_by_other(server: RedisServer, name: str) -> redlease.Lock:
    lock = redlease.Lock(server.client(), name, ttl=60, identity="other-job")
    lock.acquire()
    return lock


def test_try_and_timeout_give_up_without_running_the_command(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """`--try` skips at once and `--timeout` after waiting, with their own code; COMMAND never
    starts; a blocked `run` says what it waits for."""
    held = held_by_other(redis_server, "runskip")
    marker = tmp_path / "ran"
    cmd = ("sh", "-c", f"touch {marker}")
    tried = run("runskip", redis_server.url, *cmd, flags=("--try",))
    assert tried.wait(30) == NOT_ACQUIRED
    timed = run("runskip", redis_server.url, *cmd, flags=("--timeout", "500ms"))
    assert timed.wait(30) == NOT_ACQUIRED
    assert not marker.exists()
    err = timed.stderr.read()  # type: ignore[union-attr]
    assert "waiting for the lease" in err and "COMMAND not run" in err
    assert "COMMAND not run" in tried.stderr.read()  # type: ignore[union-attr]
    held.release()
    free = run("runskip", redis_server.url, *cmd, flags=("--try",))
    assert free.wait(30) == 0 and marker.exists()


TERM_OK = """
import os, signal, sys, time, pathlib
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
pathlib.Path(sys.argv[1]).write_text(os.environ["REDLEASE_FENCING_TOKEN"])
while True:
    time.sleep(0.05)
"""


@pytest.mark.slow
def test_a_lost_lease_has_its_own_code_and_is_not_taken_again(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    proc = run("runlost", redis_server.url, sys.executable, "-c", TERM_OK, str(token_file))
    token = int(wait_until(lambda: token_file.exists() and token_file.read_text(), timeout=20))
    client = redis_server.client()
    client.delete("redlease:{runlost}")  # an admin's force-release: the next renewal is refused
    assert proc.wait(10) == LEASE_LOST  # although COMMAND exited 0 on SIGTERM
    # no new term was taken while the command stopped: the fence counter is still the run's
    assert int(client.get("redlease:{runlost}:fence") or 0) == token
    assert client.exists("redlease:{runlost}") == 0


def test_the_cronjob_example_skips_while_another_run_holds(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """examples/cronjob-run.yaml's own flags, two real `run`s: the second skips as a success
    (--conflict-exit-code=0) with one line naming the holder; COMMAND does not run."""
    doc = yaml.safe_load((ROOT / "examples/cronjob-run.yaml").read_text())
    args = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = args[1 : args.index("--")]
    assert "--try" in flags and "--conflict-exit-code=0" in flags
    flags = [f"--redis={redis_server.url}" if f.startswith("--redis=") else f for f in flags]
    running, second = tmp_path / "running", tmp_path / "second"
    base = [sys.executable, "-m", "redlease", "run", *flags, "--"]
    first = subprocess.Popen(
        [*base, "sh", "-c", f"touch {running}; sleep 30"],
        env=env(), cwd=ROOT, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(running.exists, timeout=20)
        again = subprocess.run(
            [*base, "sh", "-c", f"touch {second}"],
            env=env(), cwd=ROOT, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "is held by" in again.stderr and "COMMAND not run" in again.stderr
        assert not second.exists()
    finally:
        first.terminate()
        first.wait(30)


def test_default_identity_is_unique_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from redlease.cli import build_parser
    from redlease.cli.flags import identity
    from redlease.core.handles import default_identity

    monkeypatch.delenv("POD_NAME", raising=False)
    args = build_parser().parse_args(["run", "--lock", "x", "--redis", "redis://h", "--", "true"])
    args.identity = None
    assert identity(args) == default_identity() and str(os.getpid()) in identity(args)


def test_held_names_the_holder_in_both_modes_and_conflict_exit_code(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """75 and the holder's name for --try and --timeout alike; ``--conflict-exit-code 0``
    (flock -E) lets a CronJob skip with success; COMMAND never runs."""
    held = held_by_other(redis_server, "runheld")
    marker = tmp_path / "ran"
    cmd = ("sh", "-c", f"touch {marker}")
    # 1ms: given up before any attempt or read ended; it learns which it was before saying
    for mode in (("--try",), ("--timeout", "300ms"), ("--timeout", "1ms")):
        proc = run("runheld", redis_server.url, *cmd, flags=mode)
        assert proc.wait(30) == NOT_ACQUIRED, mode
        assert "is held by other-job: COMMAND not run" in proc.stderr.read(), mode  # type: ignore[union-attr]
    for mode in (("--try",), ("--timeout", "300ms")):
        quiet = run("runheld", redis_server.url, *cmd,
                    flags=(*mode, "--conflict-exit-code", "0"))  # fmt: skip
        assert quiet.wait(30) == 0, mode
    assert not marker.exists()
    held.release()


def test_an_outage_is_not_held(tmp_path: Path) -> None:
    """Nothing listens: 69 (EX_UNAVAILABLE) naming the reason, never 75 or "held", in both
    modes; --conflict-exit-code does not turn an outage into a skip."""
    from redlease.cli.runspec import UNAVAILABLE
    from redlease.devtools.localredis import free_port

    dead = f"redis://127.0.0.1:{free_port()}/0"
    marker = tmp_path / "ran"
    for mode in (("--try",), ("--timeout", "1s"), ("--timeout", "1ms"),
                 ("--try", "--conflict-exit-code", "0")):  # fmt: skip
        proc = run("runout", dead, "sh", "-c", f"touch {marker}", flags=mode)
        assert proc.wait(30) == UNAVAILABLE, mode
        err = proc.stderr.read()  # type: ignore[union-attr]
        assert "Redis not reached" in err and "held" not in err, err
    assert not marker.exists()


SLOT = """
import os, sys, time, pathlib
pathlib.Path(sys.argv[1], os.environ["REDLEASE_FENCING_TOKEN"]).write_text("x")
while not pathlib.Path(sys.argv[2]).exists():
    time.sleep(0.02)
"""


def test_holders_lets_n_run_at_once(redis_server: RedisServer, tmp_path: Path) -> None:
    """``--holders 2`` (consul lock -n): two runs hold a slot each at the same time; a third
    finds both slots held and skips (75)."""
    tokens, done = tmp_path / "tokens", tmp_path / "done"
    tokens.mkdir()
    procs = [run("runpool", redis_server.url, sys.executable, "-c", SLOT, str(tokens), str(done),
                 identity=f"p{i}", flags=("--holders", "2")) for i in range(2)]  # fmt: skip
    try:
        wait_until(lambda: len(list(tokens.iterdir())) == 2, timeout=20)
        third = run("runpool", redis_server.url, "true", identity="p3",
                    flags=("--holders", "2", "--try"))  # fmt: skip
        assert third.wait(30) == NOT_ACQUIRED
    finally:
        done.write_text("x")
    assert [p.wait(30) for p in procs] == [0, 0]


def test_a_normal_run_logs_nothing_above_info(redis_server: RedisServer) -> None:
    """A run that takes the lease, runs COMMAND and exits 0 logs no warning: no persistence
    check (the test server keeps nothing across a restart), no "stepped down" warning."""
    proc = run("runquiet", redis_server.url, "true", flags=("--log-format", "json"))
    assert proc.wait(30) == 0
    records = [json.loads(line) for line in proc.stderr.read().splitlines()]  # type: ignore[union-attr]
    assert [r["event"] for r in records if r["level"] not in ("debug", "info")] == []
    assert "command exited" in [r["event"] for r in records]


@pytest.mark.long
def test_run_exits_soon_after_its_command(redis_server: RedisServer, tmp_path: Path) -> None:
    """Measured: the time from COMMAND's last instruction to `run`'s exit, over 20 runs. The
    goal is 100 ms; it was ~1.05 s when a persistence check was in flight at the exit, and
    50 to 150 ms of interpreter teardown every time (now skipped: `exit_at_once`)."""
    import statistics
    import time

    stamp = tmp_path / "end"
    spans = []
    for _ in range(20):
        proc = run("runfast", redis_server.url, "sh", "-c", f"date +%s.%N > {stamp}")
        assert proc.wait(30) == 0
        spans.append(time.time() - float(stamp.read_text()))
    print(f"exit after COMMAND: median {statistics.median(spans) * 1000:.0f} ms, "
          f"worst {max(spans) * 1000:.0f} ms")  # fmt: skip
    assert statistics.median(spans) < 0.1 and max(spans) < 0.5
