"""The state file is replaced atomically: concurrent readers always see complete JSON."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, wait_until


def test_state_file_is_always_valid_json_under_concurrent_reads(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    # renewing every 10 ms rewrites the file (renewed_at changes) about 100 times a second
    sc = sidecars("writer", lock_name, [redis_server.url], ttl=1.0, renew_deadline=0.5,
                  retry_period=0.01).wait_up()  # fmt: skip
    wait_until(sc.is_leader)
    seen: set[str] = set()
    errors: list[str] = []
    reads = 0

    def reader() -> None:
        nonlocal reads
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            text = sc.state_file.read_text()
            reads += 1
            try:
                doc = json.loads(text)
            except ValueError:
                errors.append(text)
                continue
            seen.add(doc["renewed_at"])

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(seen) >= 10, f"only {len(seen)} versions seen in {reads} reads"
    doc = json.loads(sc.state_file.read_text())
    assert set(doc) >= {
        "lock", "identity", "leader", "holder", "fencing_token", "expires_in_ms",
        "acquired_at", "renewed_at", "transitions", "nodes",
    }  # fmt: skip
    assert (sc.state_dir / "leader").exists()
    sc.signal(signal.SIGTERM)
    assert sc.wait() == 0
    assert not [p for p in sc.state_dir.iterdir() if p.name.endswith(".tmp")]  # no leftovers
    assert not (sc.state_dir / "leader").exists()
    assert json.loads(sc.state_file.read_text())["leader"] is False


def test_leader_marker_carries_its_expiry_and_never_outlives_it(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    sc = sidecars("marked", lock_name, [redis_server.url], ttl=1.5, renew_deadline=1.0,
                  retry_period=0.1).wait_up()  # fmt: skip
    wait_until(sc.is_leader)
    marker = sc.state_dir / "leader"
    wait_until(marker.exists)
    until, who = marker.read_text().split()
    assert who == "marked" and time.time() - 1 <= int(until) <= time.time() + 1.0
    # the one-line check the docs give to apps without redlease
    check = 'read until who < "$1" && [ "$until" -gt "$(date +%s)" ]'
    assert subprocess.run(["sh", "-c", check, "sh", str(marker)]).returncode in (0, 1)
    sc.signal(signal.SIGKILL)
    sc.wait()
    assert marker.exists()  # a killed sidecar cannot remove it...
    time.sleep(max(0.0, int(marker.read_text().split()[0]) + 1 - time.time()))
    assert (
        subprocess.run(["sh", "-c", check, "sh", str(marker)]).returncode == 1
    )  # ...but it ran out
    # the next start removes what an earlier run left behind
    again = Sidecar("marked", lock_name, [redis_server.url], ttl=1.5, renew_deadline=1.0,
                    retry_period=0.1, extra=["--paused"])  # fmt: skip
    again.state_dir = sc.state_dir
    again.args[again.args.index("--state-dir") + 1] = str(sc.state_dir)
    try:
        again.start().wait_up()
        assert not marker.exists()
    finally:
        again.stop()


def test_state_file_still_says_not_leader_when_the_marker_cannot_be_removed(
    tmp_path: Path,
) -> None:
    from redlease.sidecar.statefile import StateFile

    sf = StateFile(tmp_path, "job")
    os.close(sf.prepare())  # the state directory's lock file
    doc = {"lock": "job", "identity": "me", "leader": True,
           "leader_until": "2030-01-01T00:00:00.000Z"}  # fmt: skip
    sf.publish(doc)
    assert sf.marker.read_text() == "1893456000 me\n"
    # a marker that cannot be removed (tests run as root: chmod would not stop unlink, a
    # non-empty directory in its place does)
    sf.marker.unlink()
    sf.marker.mkdir()
    (sf.marker / "x").write_text("")
    with pytest.raises(IsADirectoryError):
        sf.publish({**doc, "leader": False, "leader_until": None})
    assert json.loads(sf.path.read_text())["leader"] is False  # written all the same
