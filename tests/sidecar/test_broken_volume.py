"""A state volume that cannot be written (read-only or full) never turns a step-down into a stale
claim: the lease is not handed on while the sidecar's files still say it leads.

Every test runs a real sidecar on a tmpfs of its own (mounted for the test: needs root) and a
real redis-server; the other candidate's grant time (Redis ``TIME``) and the published
``leader_until`` are both read from this machine's wall clock.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from redlease.core.timing import drift
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, Sidecar, env, wait_until
from redlease.serving.throttle import Throttle
from redlease.sidecar.statefile import WriteHealth, until_epoch

TTL, RENEW_DEADLINE, RETRY = 8.0, 5.0, 0.1  # a published claim reaches up to 5 s ahead


class Volume:
    """A tmpfs mounted at ``path`` for one test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def remount(self, mode: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True)

    def fill(self) -> None:
        """Write until the volume is full."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            with pytest.raises(OSError, match="No space left"):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Volume]:
    path = tmp_path / "state"
    path.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "redlease-test", str(path)]
    done = subprocess.run(mount, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
    try:
        yield Volume(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def start(make: Callable[..., Sidecar], identity: str, lock: str, url: str, **kw: Any) -> Sidecar:
    timing = {"ttl": TTL, "renew_deadline": RENEW_DEADLINE, "retry_period": RETRY, **kw}
    return make(identity, lock, [url], **timing).wait_up()


def leader_and_standby(
    make: Callable[..., Sidecar], lock: str, url: str, volume: Volume, **timing: float
) -> tuple[Sidecar, Sidecar]:
    """``a`` leading with its state directory on ``volume``, ``b`` standing by."""
    a = start(make, "a", lock, url, state_dir=volume.path, **timing)
    wait_until(a.is_leader, timeout=15)
    return a, start(make, "b", lock, url, **timing)


def metric(sc: Sidecar, name: str, **labels: str) -> float | None:
    """One sample of ``name`` whose labels include ``labels``; None if absent or no answer."""
    code, text = sc.get("/metrics")
    if code != 200:
        return None
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match and all(f'{k}="{v}"' in match[1] for k, v in labels.items()):
            return float(match[2])
    return None


def failing_health(sc: Sidecar, kind: str) -> dict[str, Any] | None:
    code, body = sc.get("/healthz")
    if code == 500 and body["state_file_error"]["kind"] == kind:
        assert body["election_loop"] is True  # the election itself is fine
        return dict(body)
    return None


def published_claim(sc: Sidecar) -> float:
    """The claim on disk: the state file says leader up to ``leader_until``; the marker's
    ``until`` (whole seconds, rounded down) never reaches further."""
    doc = json.loads(sc.state_file.read_text())
    assert doc["leader"] is True and doc["identity"] == sc.identity
    until = until_epoch(doc["leader_until"])
    assert until is not None
    assert int((sc.state_dir / "leader").read_text().split()[0]) <= until
    return until


def granted_at(sc: Sidecar) -> float:
    """When ``sc`` was granted the lease (Redis ``TIME``, this machine's clock)."""
    doc = wait_until(lambda: (d := sc.status()) and d["leader"] and d, timeout=30)
    at = until_epoch(doc["acquired_at"])
    assert at is not None
    return at


def redlease_wait(state_dir: Path, lock: str) -> int:
    args = [sys.executable, "-m", "redlease", "wait", "--state-dir", str(state_dir),
            "--lock", lock, "--timeout", "0.3"]  # fmt: skip
    return subprocess.run(args, env=env(), cwd=ROOT, capture_output=True).returncode


def failure_lines(sc: Sidecar) -> list[str]:
    return [line for line in sc.log().splitlines() if '"state file write failed"' in line]


def test_sigterm_on_a_read_only_volume_hands_over_only_after_the_published_claim(
    redis_server: RedisServer, volume: Volume, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    a, b = leader_and_standby(sidecars, lock_name, redis_server.url, volume)
    volume.remount("ro")
    wait_until(lambda: failing_health(a, "EROFS"), timeout=15)
    assert metric(a, "redlease_state_file_writable") == 0
    until = published_claim(a)  # the volume is read-only: this is what readers see from now on
    assert a.is_leader() and not b.is_leader()

    a.signal(signal.SIGTERM)
    answers: set[int] = set()
    failures = 0.0
    assert a.proc is not None
    deadline = time.monotonic() + RENEW_DEADLINE + 30
    while a.proc.poll() is None and time.monotonic() < deadline:
        # while it holds on, A still answers, and reports the failure
        code, _ = a.get("/healthz", timeout=1.0)
        answers.add(code)
        failures = metric(a, "redlease_state_file_write_failures_total", kind="EROFS") or failures
    exited = time.time()
    assert a.wait() == 0
    assert exited >= until, "A exited while its published claim could still be trusted"
    assert 500 in answers and 200 not in answers
    # no other candidate was granted the lease while A's files said A leads
    assert granted_at(b) >= until - drift(TTL)
    assert redlease_wait(volume.path, lock_name) == 1  # the left-over claim has run out
    log = a.log()
    assert "holding the lease until the published claim runs out" in log
    assert failures >= 3 and len(failure_lines(a)) == 1  # one line, however many attempts


def test_a_volume_writable_again_while_holding_publishes_the_step_down_and_releases(
    redis_server: RedisServer, volume: Volume, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    # a claim reaching up to 20 s ahead: the hold is cut short long before it would run out
    a, b = leader_and_standby(sidecars, lock_name, redis_server.url, volume,
                              ttl=30.0, renew_deadline=20.0)  # fmt: skip
    volume.remount("ro")
    wait_until(lambda: failing_health(a, "EROFS"), timeout=15)
    until = published_claim(a)
    a.signal(signal.SIGTERM)
    wait_until(lambda: "holding the lease until the published claim runs out" in a.log())
    volume.remount("rw")
    assert a.wait(timeout=30) == 0
    assert "step-down published, releasing" in a.log()
    doc = json.loads(a.state_file.read_text())
    assert doc["leader"] is False and not (volume.path / "leader").exists()
    assert granted_at(b) < until  # released once leader: false was out, not at the claim's end


def test_planned_handoff_on_a_read_only_volume_waits_for_the_published_claim_then_recovers(
    redis_server: RedisServer, volume: Volume, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    a = start(sidecars, "a", lock_name, redis_server.url, state_dir=volume.path,
              extra=["--preferred-holder", "b"])  # fmt: skip
    wait_until(a.is_leader, timeout=15)
    volume.remount("ro")
    wait_until(lambda: failing_health(a, "EROFS"), timeout=15)
    until = published_claim(a)
    b = start(sidecars, "b", lock_name, redis_server.url)  # the preferred holder shows up
    granted = granted_at(b)
    assert granted >= until - drift(TTL)
    if "holding the lease until the published claim runs out" not in a.log():
        # A stepped down only after its claim had run out (B was slow to start on a loaded
        # machine): nothing to outwait, and B was granted after the claim, not before
        assert granted >= until - 0.01  # both times are printed to the millisecond
    assert failing_health(a, "EROFS")  # still failing: A keeps saying so
    volume.remount("rw")
    wait_until(lambda: a.get("/healthz")[0] == 200, timeout=15)
    assert metric(a, "redlease_state_file_writable") == 1
    doc = json.loads(a.state_file.read_text())
    assert doc["leader"] is False and not (volume.path / "leader").exists()
    assert "state file written again" in a.log()
    assert len(failure_lines(a)) == 1


def test_sigterm_on_a_full_volume_withdraws_the_claim_and_releases_at_once(
    redis_server: RedisServer, volume: Volume, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    a, b = leader_and_standby(sidecars, lock_name, redis_server.url, volume)
    volume.fill()
    wait_until(lambda: failing_health(a, "ENOSPC"), timeout=15)
    wait_until(lambda: (metric(a, "redlease_state_file_write_failures_total", kind="ENOSPC")
                        or 0) >= 2, timeout=15)  # fmt: skip
    published_claim(a)
    a.signal(signal.SIGTERM)
    assert a.wait(timeout=30) == 0
    # the leader: false document did not fit, so the old one was removed (a missing file and
    # a missing marker claim nothing) and the lease released at once
    assert not a.state_file.exists() or json.loads(a.state_file.read_text())["leader"] is False
    assert not (volume.path / "leader").exists()
    assert "holding the lease" not in a.log()
    granted_at(b)
    assert redlease_wait(volume.path, lock_name) == 1
    assert len(failure_lines(a)) == 1


def test_failures_are_logged_once_per_kind_per_interval() -> None:
    throttle = Throttle(10.0)
    assert [throttle.allow("EROFS", t) for t in (0.0, 1.0, 9.9)] == [0, None, None]
    assert throttle.allow("ENOSPC", 2.0) == 0  # another kind has its own interval
    assert throttle.allow("EROFS", 10.0) == 2  # says how many it held back
    health = WriteHealth(interval=10.0)
    ro = OSError(errno.EROFS, "Read-only file system")
    assert health.failed(ro, 0.0, 1000.0) == 0 and health.failed(ro, 1.0, 1001.0) is None
    assert health.failing is not None and health.failing.failures == 2
    assert health.failing.kind == "EROFS" and health.failing.since == 1000.0
    ended = health.written()
    assert ended is not None and ended.failures == 2 and health.failing is None
