"""``spec.strictRestart`` followed live by a ``--lock-ref`` sidecar (KMock over real HTTP): the
reasons its /status gives for nodes that lost their data switch between the default ("rejoins
by itself in N s") and the strict mode ("cannot rejoin by itself"), and a bad value is refused
naming the field while the settings stay."""

from __future__ import annotations

from typing import Any

import aiohttp
import kmock
import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, env, until
from redlease.kube import paths

NS = "shop"
DLOCKS = "redlease.dev/v1alpha1/distributedlocks"


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [3], indirect=True)
async def test_spec_strict_restart_is_followed_live(redis_nodes: list[RedisServer]) -> None:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
        api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
        api.resources[DLOCKS] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        api.objects["v1/pods", NS, "pod-a"] = {"metadata": {"name": "pod-a", "namespace": NS}}
        api.objects[DLOCKS, NS, "orders"] = {
            "metadata": {"name": "orders", "namespace": NS, "generation": 1},
            "spec": {
                "keys": ["orders-strict"],
                "ttlSeconds": 3,
                "renewDeadlineSeconds": 2,
                "retryPeriodSeconds": 1,
                "nodes": [{"url": s.url} for s in redis_nodes],
            },
        }
        base = f"http://127.0.0.1:{srv.port}"
        sc = Sidecar(
            "pod-a", "", [], extra=["--lock-ref", "orders", "--kube-api", base],
            environ=env(POD_NAME="pod-a", POD_NAMESPACE=NS),
        ).start()  # fmt: skip
        try:
            await until(sc.is_leader, timeout=30)
            for server in redis_nodes[1:]:
                server.restart()  # no persistence: data and markers gone
            lost = {s.address for s in redis_nodes[1:]}

            def reasons(wanted: str) -> bool:
                why = (sc.status() or {}).get("nodes_not_counting") or {}
                return set(why) == lost and all(wanted in w for w in why.values())

            await until(lambda: reasons("rejoins by itself in"), timeout=30)
            async with aiohttp.ClientSession(base) as http:

                async def patch_spec(spec: dict[str, Any]) -> None:
                    path = paths.lock(NS, "orders")
                    headers = {"Content-Type": "application/merge-patch+json"}
                    async with http.patch(path, json={"spec": spec}, headers=headers) as resp:
                        assert resp.status == 200, await resp.text()

                await patch_spec({"strictRestart": True})
                await until(lambda: reasons("cannot rejoin by itself"), timeout=30)
                await patch_spec({"strictRestart": "yes"})  # refused, naming the field
                await until(lambda: "spec.strictRestart" in sc.log(), timeout=30)
                assert reasons("cannot rejoin by itself")  # the settings stay
                await patch_spec({"strictRestart": False})
                await until(lambda: reasons("rejoins by itself in"), timeout=30)
            assert sc.proc is not None and sc.proc.poll() is None
            assert "Traceback" not in sc.log()
        finally:
            sc.stop()
