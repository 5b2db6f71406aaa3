"""The sidecar's HTTP port under hostile clients: hundreds of half-sent requests and a low
descriptor limit must not stop /healthz, the state file or the election."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.netfault import closed_by_server, half_open
from redlease.devtools.sidecarprocs import Sidecar, wait_until

HALF = b"GET /status HTTP/1.1\r\nHost: sidecar\r\nX-Slow: "  # never finished


@pytest.mark.slow
def test_half_open_flood_under_a_low_fd_limit(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    sc = sidecars("target", lock_name, [redis_server.url], ttl=3, renew_deadline=2,
                  retry_period=0.2, max_open_files=256).wait_up()  # fmt: skip
    wait_until(sc.is_leader)
    socks = half_open(sc.port, 500, HALF, timeout=2)
    try:
        # probes get through while the flood holds every slot it can
        for _ in range(10):
            probe = Sidecar.__new__(Sidecar)
            probe.port, probe._conn = sc.port, None
            assert probe.get("/healthz", timeout=3)[0] == 200
            probe._conn and probe._conn.close()
        assert sc.is_leader()
        # state-file writes keep working: a second candidate shows up in the leader's file
        other = sidecars("other", lock_name, [redis_server.url], ttl=3, renew_deadline=2,
                         retry_period=0.2).wait_up()  # fmt: skip
        wait_until(lambda: json.loads(sc.state_file.read_text())["candidates"] == 2, timeout=10)
        assert other.status() is not None
        # the server drops every unfinished request after its timeout (5 s)
        wait_until(lambda: all(closed_by_server(s) for s in socks), timeout=15, step=0.5)
    finally:
        for s in socks:
            s.close()
    log = sc.log()
    assert "Traceback" not in log and "Too many open files" not in log
    assert len(log.splitlines()) < 300, "log volume must stay bounded"
