"""The outage of issue 36, measured on sidecars: a 5-node RedLock set (AOF, appendfsync always)
loses 2 nodes (the leader keeps leading), then a 3rd (it steps down); the three restart from
their AOF. The sidecars lead again by themselves within restart_delay (the library's 60 s) +
a retry period, every surface says "rejoins by itself in N s" meanwhile, the token after is
above every token before, and no two sidecars say leader at once. A minute long: `make
test-long`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from redlease.core.restart import RESTART_DELAY
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, wait_until

TTL, DEADLINE, RETRY = 5.0, 3.0, 1.0


@pytest.fixture
def aof_nodes() -> Iterator[list[RedisServer]]:
    servers = [RedisServer(persistent=True).start() for _ in range(5)]
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.mark.long
def test_sidecars_lead_again_after_three_of_five_restart_from_aof(
    aof_nodes: list[RedisServer], sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    urls = [s.url for s in aof_nodes]
    timing = dict(ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY)
    scs = [sidecars(i, lock_name, urls, **timing).wait_up() for i in ("pod-a", "pod-b")]
    wait_until(lambda: any(sc.is_leader() for sc in scs), timeout=30)
    before = max((sc.status() or {}).get("fencing_token") or 0 for sc in scs)
    both = 0

    def watching(cond: Callable[[], bool]) -> Callable[[], bool]:
        """``cond``, and on every poll: no two sidecars say leader at once (sampled)."""

        def check() -> bool:
            nonlocal both
            both += all(sc.is_leader() for sc in scs)
            return cond()

        return check

    for s in aof_nodes[:2]:
        s.kill()
    assert any(sc.is_leader() for sc in scs)  # 3 of 5: still leads
    aof_nodes[2].kill()
    wait_until(watching(lambda: not any(sc.is_leader() for sc in scs)), timeout=DEADLINE + 5)
    restarted = time.monotonic()
    for s in aof_nodes[:3]:
        s.start()
    lost = {s.address for s in aof_nodes[:3]}

    def says_when() -> bool:
        for sc in scs:
            doc = sc.status() or {}
            why = doc.get("nodes_not_counting") or {}
            if set(why) != lost or not all("rejoins by itself in" in w for w in why.values()):
                return False
        return True

    wait_until(watching(says_when), timeout=30, step=0.05)
    wait_until(
        watching(lambda: any(sc.is_leader() for sc in scs)),
        timeout=RESTART_DELAY + 30,
        step=0.05,
    )
    took = time.monotonic() - restarted
    print(f"\nled again {took:.1f}s after the restart (restart_delay {RESTART_DELAY:g}s)")
    assert took <= RESTART_DELAY + RETRY + 10  # + a margin for a busy machine
    leader = next(sc for sc in scs if sc.is_leader())
    after = (leader.status() or {}).get("fencing_token") or 0
    assert after > before
    assert both == 0
