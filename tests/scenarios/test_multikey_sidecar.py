"""A two-key DistributedLock: the sidecar leads only while it holds both keys, and the operator
and the sidecar name a holder only for the whole lease."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import redlease
from redlease.core.keys import LockKeys
from redlease.devtools.kubeemulator import NAMESPACE, Cluster, until
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, env


@pytest.mark.slow
async def test_sidecar_leads_only_while_it_holds_every_key(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    a, b = (f"{k}-{uuid.uuid4().hex[:6]}" for k in ("ka", "kb"))
    await cluster.create(
        "pair",
        {"keys": [a, b], "nodes": [{"url": redis_server.url}], "ttlSeconds": 3,
         "renewDeadlineSeconds": 2, "retryPeriodSeconds": 1},
    )  # fmt: skip
    client = redis_server.client()
    outsider = redlease.Lock(client, b, ttl=30, identity="outsider")
    outsider.acquire()
    sc = Sidecar("pod-0", "", [], extra=["--lock-ref", "pair", "--kube-api", cluster.url],
                 environ=env(POD_NAME="pod-0", POD_NAMESPACE=NAMESPACE)).start()  # fmt: skip
    sc.lock = a  # the state file is named after the first key
    try:
        await asyncio.to_thread(sc.wait_up)

        def status() -> dict[str, Any]:
            return sc.status() or {}

        # one key taken by someone else: no leader, and no surface names the outsider as the
        # holder of the two-key lock
        await until(lambda: asyncio.to_thread(lambda: status().get("holder_unknown")), what="seen")
        assert status()["leader"] is False and status()["holder"] is None
        assert "holder" not in cluster.status("pair")
        await asyncio.sleep(1.5)  # a retry period and a half: it must still not lead
        assert status()["leader"] is False

        outsider.release()  # the notification wakes the sidecar
        first = await until(
            lambda: asyncio.to_thread(lambda: (d := status()).get("leader") and d), what="leader"
        )
        token = first["fencing_token"]
        for key in (a, b):
            lease = client.hgetall(LockKeys.for_name(key).lease)
            assert lease[b"holder"] == b"pod-0" and int(lease[b"fence"]) == token
        await until(lambda: cluster.status("pair").get("holder") == "pod-0", what="CR holder")
        assert cluster.status("pair")["fencingToken"] == token

        # an administrator removes one key's lease: the sidecar stops leading at its next
        # renewal (and takes both keys again, with a newer token)
        client.delete(LockKeys.for_name(b).lease)
        await until(lambda: asyncio.to_thread(lambda: '"stopped leading"' in sc.log()),
                    timeout=10, what="stepped down")  # fmt: skip
        again = await until(
            lambda: asyncio.to_thread(
                lambda: (d := status()).get("leader") and d["fencing_token"] > token and d
            ),
            what="leads again",
        )
        assert again["holder"] == "pod-0"
    finally:
        sc.stop()
        client.close()
