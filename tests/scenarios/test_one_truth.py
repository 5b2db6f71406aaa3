"""The seam test of the lock view: every surface says the same thing in the same fault.

A 5-node RedLock set, two sidecars, the operator (kopf against KMock) with a DistributedLock on
the same nodes, and `redlease status`. With 2 nodes killed, the sidecars' /status, state files
and /metrics, `redlease status` and the DistributedLock status all say 3 of 5 healthy within two
retry periods and keep saying it, and all name the same holder and fencing token. A stale
holder on a minority of nodes is named by none of them. With 2 of 3 nodes restarted empty,
every surface says 1 of 3 healthy, the holder unknown, and names both nodes.
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
from prometheus_client.parser import text_string_to_metric_families

from redlease.core.keys import LockKeys
from redlease.devtools.kubeemulator import Cluster, until
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, Sidecar, env

TTL, DEADLINE, RETRY = 5.0, 3.0, 1.0


def cli_status_doc(lock: str, urls: list[str]) -> tuple[int, dict[str, Any]]:
    """`redlease status --json`: (exit code, document, or {"stderr": ...} if none)."""
    args = [sys.executable, "-m", "redlease", "status", "--lock", lock, "--json"]
    for url in urls:
        args += ["--redis", url]
    out = subprocess.run(args, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=30)
    try:
        doc: dict[str, Any] = json.loads(out.stdout)
    except ValueError:
        doc = {"stderr": out.stderr}
    return out.returncode, doc


def cli_status(lock: str, urls: list[str]) -> dict[str, Any]:
    code, doc = cli_status_doc(lock, urls)
    assert code == 0, doc
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


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [3], indirect=True)
async def test_nodes_restarted_empty_do_not_count_on_any_surface(
    cluster: Cluster, redis_nodes: list[RedisServer]
) -> None:
    """2 of 3 nodes restarted empty: no leader (they cannot be re-seeded), and every surface
    says 1 of 3 healthy, the holder unknown (not free), and names both nodes; `connected`
    readiness is 503; the sidecars' logs say what the operator must do, once per node."""
    urls = [s.url for s in redis_nodes]
    lock = f"empty-{uuid.uuid4().hex[:8]}"
    await cluster.create("empty", {"keys": [lock], "nodes": [{"url": u} for u in urls]})
    timing = dict(ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY)
    scs = [Sidecar(i, lock, urls, **timing).start() for i in ("pod-a", "pod-b")]  # type: ignore[arg-type]
    lost = {s.address for s in redis_nodes[1:]}
    try:
        for sc in scs:
            await asyncio.to_thread(sc.wait_up)
        await until(
            lambda: any(sc.is_leader() for sc in scs) and cluster.status("empty").get("holder"),
            timeout=30,
            what="a leader",
        )
        for server in redis_nodes[1:]:
            server.restart()  # no persistence: data and markers gone

        def everywhere() -> dict[str, Any] | None:
            seen: dict[str, Any] = {}
            for sc in scs:
                doc = sc.status()
                if doc is None:
                    return None
                seen[f"{sc.identity}/status"] = doc
                seen[f"{sc.identity}/file"] = json.loads(sc.state_file.read_text())
            code, cli = cli_status_doc(lock, urls)
            seen["redlease status"] = cli
            for doc in seen.values():
                if (
                    "nodes" not in doc
                    or doc["nodes"]["healthy"] != 1
                    or doc["holder"] is not None
                    or not doc["holder_unknown"]
                    or set(doc["nodes_not_counting"]) != lost
                ):
                    return None
            st = cluster.status("empty")
            if st.get("healthyNodes") != 1 or set(st.get("unhealthyNodes", ())) != lost:
                return None
            seen["DistributedLock"] = st
            seen["cli exit"] = code
            return seen

        seen = await until(everywhere, timeout=30, what="1/3 healthy everywhere")
        assert seen["cli exit"] == 1
        assert seen["DistributedLock"]["phase"] == "Unavailable"
        assert "holder" not in seen["DistributedLock"]
        for sc in scs:
            m = metrics_view(sc)
            assert (m["healthy"], m["not_counting"], m["quorum"]) == (1, 2, 2)
            code, body = sc.get("/readyz")
            assert code == 503 and body == {"ready": False, "leader": False}
        # they stay out (nothing brings them back by itself); the log says so once per node
        end = time.monotonic() + 3 * RETRY
        while time.monotonic() < end:
            assert all((sc.status() or {}).get("nodes", {}).get("healthy") == 1 for sc in scs)
            await asyncio.sleep(RETRY / 2)
        for sc in scs:
            log = sc.log()
            for address in lost:
                lines = [
                    line
                    for line in log.splitlines()
                    if "needs an operator" in line and address in line
                ]
                assert len(lines) == 1, lines  # rate-limited: not once per read
                assert "DEL redlease:node" in lines[0]
            assert "rejoining" not in log
    finally:
        for sc in scs:
            sc.stop()
