"""`redlease sidecar --cluster` on a real 3+3 Redis Cluster whose master serving the lock is
SIGKILLed: the running sidecar follows the failover and leads again, without a restart."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from redlease.core.keys import LockKeys
from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.sidecarprocs import Sidecar, wait_until


@pytest.mark.slow
def test_sidecar_leads_again_after_the_master_of_its_lock_fails_over(
    sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    with LocalCluster(replicas=1, node_timeout_ms=1000) as cluster:
        key = LockKeys.for_name(lock_name).lease
        old = cluster.master_of(key)
        # the killed master first among the seeds: the client was built through it
        seeds = [old.url, *(s.url for s in cluster.servers if s is not old)]
        sc = sidecars("pod-0", lock_name, seeds, ttl=3, renew_deadline=2, retry_period=0.2,
                      extra=["--cluster"])  # fmt: skip
        sc.wait_up()
        led = wait_until(lambda: (d := sc.status()) and d["leader"] and d, timeout=30)
        token = led["fencing_token"]

        cluster.wait_synced(old)
        old.kill()
        # the outage is seen (the observer reads every retry period; the failover takes longer)
        wait_until(lambda: (d := sc.status()) and d["nodes"]["healthy"] == 0, timeout=30)
        cluster.wait_promoted(key, old)

        def leads_on_the_new_master() -> dict[str, object] | None:
            doc = sc.status()
            if not (doc and doc["leader"] and doc["holder"] == "pod-0"):
                return None
            return doc if doc["nodes"]["healthy"] == 1 else None

        # the observer's read after the promotion says healthy, and the sidecar leads
        doc = wait_until(leads_on_the_new_master, timeout=60)
        assert isinstance(doc["fencing_token"], int) and doc["fencing_token"] >= token
        assert sc.proc is not None and sc.proc.poll() is None
