"""The state file is replaced atomically: concurrent readers always see complete JSON."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable

from redlease.devtools.localredis import RedisServer
from tests.sidecar.procs import Sidecar, wait_until


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
