"""The seam test of the lock view: every surface says the same thing in the same fault.

A 5-node RedLock set, two sidecars, the operator (kopf against KMock) with a DistributedLock on
the same nodes, and `redlease status`. With 2 nodes killed, the sidecars' /status, state files
and /metrics, `redlease status` and the DistributedLock status all say 3 of 5 healthy within two
retry periods and keep saying it, and all name the same holder and fencing token. A stale
holder on a minority of nodes is named by none of them.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from dlock_harness import Cluster, until
from prometheus_client.parser import text_string_to_metric_families

from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from tests.sidecar.procs import ROOT, Sidecar, env

TTL, DEADLINE, RETRY = 5.0, 3.0, 1.0


def cli_status(lock: str, urls: list[str]) -> dict[str, Any]:
    args = [sys.executable, "-m", "redlease", "status", "--lock", lock, "--json"]
    for url in urls:
        args += ["--redis", url]
    out = subprocess.run(args, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=30)
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def metrics_view(sc: Sidecar) -> dict[str, float]:
    code, text = sc.get("/metrics")
    assert code == 200
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "redlease_nodes":
                out[sample.labels["state"]] = sample.value
            elif sample.name == "redlease_fencing_token":
                out["token"] = sample.value
    return out


def surfaces(
    scs: list[Sidecar], cluster: Cluster, name: str, lock: str, urls: list[str]
) -> dict[str, tuple[Any, Any, int]]:
    """(holder, fencing token, healthy nodes) as every surface shows it right now."""
    seen: dict[str, tuple[Any, Any, int]] = {}
    for sc in scs:
        doc = sc.status()
        assert doc is not None
        seen[f"{sc.identity}/status"] = (
            doc["holder"],
            doc["fencing_token"],
            doc["nodes"]["healthy"],
        )
        f = json.loads(sc.state_file.read_text())
        seen[f"{sc.identity}/file"] = (f["holder"], f["fencing_token"], f["nodes"]["healthy"])
        m = metrics_view(sc)
        seen[f"{sc.identity}/metrics"] = (doc["holder"], int(m["token"]) or None, int(m["healthy"]))
    cli = cli_status(lock, urls)
    seen["redlease status"] = (cli["holder"], cli["fencing_token"], cli["nodes"]["healthy"])
    st = cluster.status(name)
    seen["DistributedLock"] = (st.get("holder"), st.get("fencingToken"), st.get("healthyNodes", -1))
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [5], indirect=True)
async def test_every_surface_tells_the_same_truth(
    cluster: Cluster, redis_nodes: list[RedisServer]
) -> None:
    urls = [s.url for s in redis_nodes]
    lock = f"truth-{uuid.uuid4().hex[:8]}"
    await cluster.create("truth", {"keys": [lock], "nodes": [{"url": u} for u in urls]})
    timing = dict(ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY)
    scs = [Sidecar(i, lock, urls, **timing).start() for i in ("pod-a", "pod-b")]  # type: ignore[arg-type]
    try:
        for sc in scs:
            await asyncio.to_thread(sc.wait_up)

        def agreed(healthy: int) -> Callable[[], dict[str, tuple[Any, Any, int]] | None]:
            def check() -> dict[str, tuple[Any, Any, int]] | None:
                seen = surfaces(scs, cluster, "truth", lock, urls)
                values = set(seen.values())
                if len(values) == 1 and next(iter(values))[2] == healthy:
                    ((holder, token, _),) = values
                    return seen if holder in ("pod-a", "pod-b") and token else None
                return None

            return check

        before = await until(lambda: asyncio.to_thread(agreed(5)), timeout=30, what="5/5")
        holder, token, _ = next(iter(before.values()))

        for victim in redis_nodes[3:]:
            victim.kill()
        killed_at = time.monotonic()

        def sidecars_say(healthy: int) -> bool:
            return all(
                (doc := sc.status()) is not None and doc["nodes"]["healthy"] == healthy
                for sc in scs
            )

        await until(lambda: asyncio.to_thread(sidecars_say, 3), timeout=10, what="3/5")
        assert time.monotonic() - killed_at <= 2 * RETRY, "sidecars took over 2 retry periods"
        await until(lambda: asyncio.to_thread(agreed(3)), timeout=10, what="3/5 everywhere")
        # ...and they keep saying it (node health has one writer: no flapping back to 5)
        end = time.monotonic() + 3 * RETRY
        while time.monotonic() < end:
            seen = await asyncio.to_thread(surfaces, scs, cluster, "truth", lock, urls)
            assert set(seen.values()) == {(holder, token, 3)}, seen
            await asyncio.sleep(RETRY / 4)
    finally:
        for sc in scs:
            sc.stop()


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [5], indirect=True)
async def test_a_stale_holder_on_a_minority_is_named_by_no_surface(
    cluster: Cluster, redis_nodes: list[RedisServer]
) -> None:
    urls = [s.url for s in redis_nodes]
    lock = f"ghost-{uuid.uuid4().hex[:8]}"
    keys = LockKeys.for_name(lock)
    client = redis.Redis.from_url(urls[0])
    client.hset(keys.lease, mapping={"owner": "x" * 32, "holder": "phantom-holder", "fence": 99})
    client.pexpire(keys.lease, 60_000)
    client.set(keys.fence, 99)
    client.close()
    await cluster.create("ghost", {"keys": [lock], "nodes": [{"url": u} for u in urls]})
    # a paused sidecar only observes: its view is the lock's, not its own lease
    sc = Sidecar("watcher", lock, urls, ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY,
                 extra=["--paused"]).start()  # fmt: skip
    try:
        await asyncio.to_thread(sc.wait_up)
        await until(lambda: cluster.status("ghost").get("phase") == "Free", timeout=20, what="Free")
        await until(
            lambda: asyncio.to_thread(
                lambda: (sc.status() or {}).get("nodes", {}).get("healthy") == 5
            )
        )
        for _ in range(3):
            doc = sc.status()
            assert doc is not None and doc["holder"] is None and doc["holder_unknown"] is None
            assert json.loads(sc.state_file.read_text())["holder"] is None
            cli = await asyncio.to_thread(cli_status, lock, urls)
            assert cli["holder"] is None and cli["last_fencing_token"] == 99
            assert "holder" not in cluster.status("ghost")
            await asyncio.sleep(RETRY / 2)
        assert "phantom-holder" not in sc.log()
    finally:
        sc.stop()
