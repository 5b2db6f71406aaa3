"""Redis outages: the leader steps down at its deadline and recovers; start without Redis."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.sidecarprocs import Sidecar, wait_until

TTL, DEADLINE, RETRY = 1.5, 1.0, 0.1


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "pause"])
def test_leader_steps_down_at_deadline_and_recovers(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str, fault: str
) -> None:
    """``--ready leader``: /readyz follows leadership; the default ``connected`` mode, on a
    second sidecar, follows the reachability of a quorum of nodes."""
    sc = sidecars("solo", lock_name, [redis_server.url], ttl=TTL, renew_deadline=DEADLINE,
                  retry_period=RETRY, extra=["--ready", "leader"]).wait_up()  # fmt: skip
    standby = sidecars("standby", lock_name, [redis_server.url], ttl=TTL,
                       renew_deadline=DEADLINE, retry_period=RETRY).wait_up()  # fmt: skip
    wait_until(sc.is_leader)
    assert sc.get("/readyz")[0] == 200
    wait_until(lambda: standby.get("/readyz")[0] == 200)  # connected, though not leader
    assert standby.get("/readyz")[1] == {"ready": True, "leader": False}
    t0 = time.monotonic()
    if fault == "kill":
        redis_server.kill()
    else:
        redis_server.pause()
    try:
        wait_until(lambda: sc.get("/readyz")[0] == 503, timeout=5, step=0.005)
        stepped = time.monotonic() - t0
        assert stepped <= DEADLINE + 0.3, f"stepped down after {stepped:.3f}s"
        doc = sc.status()
        assert doc is not None and doc["leader"] is False
        wait_until(lambda: standby.get("/readyz")[0] == 503, timeout=5)  # not connected
        # alive while Redis is away: /healthz stays 200 for longer than a TTL
        end = time.monotonic() + TTL
        while time.monotonic() < end:
            assert sc.get("/healthz")[0] == 200
            time.sleep(0.05)
        assert sc.status()["nodes"]["healthy"] == 0  # type: ignore[index]
    finally:
        if fault == "kill":
            redis_server.start()
        else:
            redis_server.resume()
    wait_until(lambda: sc.is_leader() or standby.is_leader(), timeout=15)
    leader = sc if sc.is_leader() else standby
    assert leader.get("/readyz")[0] == 200
    wait_until(lambda: sc.status()["nodes"]["healthy"] == 1)  # type: ignore[index]
    log = leader.log()
    assert '"redis unavailable, retrying with back-off"' in log
    assert '"redis reachable again"' in log


@pytest.mark.slow
def test_start_without_redis_retries_with_backoff_then_leads(
    sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    port = free_port()
    url = f"redis://:s3cret-pw@127.0.0.1:{port}/0"
    sc = sidecars("early", lock_name, [url], ttl=TTL, renew_deadline=DEADLINE,
                  retry_period=RETRY).wait_up()  # fmt: skip
    wait_until(lambda: "cannot reach Redis" in sc.log(), timeout=10)
    time.sleep(1.0)
    assert sc.proc is not None and sc.proc.poll() is None, "the sidecar must not crash"
    assert sc.get("/healthz")[0] == 200 and sc.get("/readyz")[0] == 503
    log = sc.log()
    assert "retry_in" in log and "Traceback" not in log
    assert "s3cret-pw" not in log  # no secrets in logs
    with RedisServer(port=port, password="s3cret-pw"):
        wait_until(sc.is_leader, timeout=15)
