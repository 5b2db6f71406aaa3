"""A ``--lock-ref`` sidecar reads its DistributedLock's Namespace and Secrets again for a spec
change, not for each status the operator writes (KMock over real HTTP)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import kmock

from redlease.devtools.kubeemulator import AS_ADMIN, NAMESPACE, Emulator, declare
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until
from redlease.kube import paths
from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient
from redlease.sidecar.config import ElectionConfig, LockRef
from redlease.sidecar.lockref import LockRefFollower


def _namespace_reads(api: Emulator) -> int:
    path = paths.namespace(NAMESPACE)
    return sum(1 for r in list(api._requests) if r.method == "GET" and r.url.path == path)


async def _patch(api: Emulator, patch: dict[str, Any], subresource: str = "") -> None:
    headers = {"Content-Type": "application/merge-patch+json", **AS_ADMIN}
    where = paths.lock(NAMESPACE, "orders", subresource)
    async with api.patch(where, json=patch, headers=headers) as resp:
        assert resp.status == 200, await resp.text()


async def test_status_writes_cost_no_reads_and_a_spec_change_is_followed(
    redis_server: RedisServer,
) -> None:
    async with Emulator() as api, kmock.Server(api) as server:
        declare(api)
        body = {
            "apiVersion": "redlease.dev/v1alpha1",
            "kind": "DistributedLock",
            "metadata": {"name": "orders", "namespace": NAMESPACE},
            "spec": {"keys": ["orders"], "nodes": [{"url": redis_server.url}], "ttlSeconds": 10},
        }
        async with api.post(paths.locks(NAMESPACE), json=body, headers=AS_ADMIN) as resp:
            assert resp.status == 201, await resp.text()
        client = KubeClient(ClusterAuth(f"http://127.0.0.1:{server.port}"))
        configs: list[ElectionConfig] = []
        follower = LockRefFollower(
            client, LockRef(NAMESPACE, "orders"), "pod-a", configs.append, resync=3600
        )
        task = asyncio.ensure_future(follower.run())
        try:

            async def read_once() -> bool:
                return bool(configs)

            async def ttl_followed() -> bool:
                return bool(configs) and configs[-1].timing.ttl == 12

            await async_wait_until(read_once, timeout=30)
            before = _namespace_reads(api)
            for phase in ("Free", "Held", "Free", "Held", "Free"):
                await _patch(api, {"status": {"phase": phase}}, "status")
            await _patch(api, {"spec": {"ttlSeconds": 12}})  # events come in order
            await async_wait_until(ttl_followed, timeout=30)
            # the spec change's read only: none for the watch's start, none per status write
            # (before: one per event)
            assert _namespace_reads(api) - before == 1
            assert len(configs) == 2
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close()
