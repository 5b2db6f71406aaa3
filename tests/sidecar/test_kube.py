"""Pod label and --lock-ref against KMock (a Kubernetes API emulator over real HTTP)."""

from __future__ import annotations

import asyncio
import base64
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import kmock
import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, env, until
from redlease.kube import paths
from tests.core.test_consent import Recorder, listening, refuse, sentinel_naming

NS = "shop"
DLOCKS = "redlease.dev/v1alpha1/distributedlocks"
LABEL = "redlease.dev/leader"


def label(api: kmock.KubernetesEmulator, pod: str) -> str | None:
    labels = api.objects["v1/pods", NS, pod].raw.get("metadata", {}).get("labels") or {}
    value: str | None = labels.get(LABEL)
    return value


@pytest.mark.slow
async def test_lock_ref_follows_spec_and_pod_label_tracks_leadership() -> None:
    secured = RedisServer(password="pw-from-secret").start()
    try:
        await scenario(secured)
    finally:
        secured.stop()


async def scenario(server: RedisServer) -> None:
    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
        api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
        api.resources["v1/secrets"] = kmock.ResourceInfo(kind="Secret", namespaced=True)
        api.resources[DLOCKS] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        for pod in ("pod-a", "pod-b"):
            api.objects["v1/pods", NS, pod] = {"metadata": {"name": pod, "namespace": NS}}
        api.objects["v1/secrets", NS, "redis-auth"] = {
            "metadata": {
                "name": "redis-auth",
                "namespace": NS,
                "labels": {"redlease.dev/credentials": "true"},
            },
            "data": {"password": base64.b64encode(b"pw-from-secret").decode()},
        }
        api.objects[DLOCKS, NS, "orders"] = {
            "metadata": {"name": "orders", "namespace": NS, "generation": 1},
            "spec": {
                "keys": ["orders-lock"],
                # the CRD takes whole seconds (as client-go's Lease does)
                "ttlSeconds": 3,
                "renewDeadlineSeconds": 2,
                "retryPeriodSeconds": 1,
                "nodes": [{"url": f"redis://127.0.0.1:{server.port}/0"}],
                "auth": {"secretRef": {"name": "redis-auth"}},
            },
        }
        base = f"http://127.0.0.1:{srv.port}"
        scs = {
            pod: Sidecar(pod, "", [], extra=["--lock-ref", "orders", "--pod-label",
                                            "--kube-api", base],
                         environ=env(POD_NAME=pod, POD_NAMESPACE=NS)).start()
            for pod in ("pod-a", "pod-b")
        }  # fmt: skip
        try:
            await run_steps(api, base, scs, until)
        finally:
            for sc in scs.values():
                sc.stop()


async def run_steps(
    api: kmock.KubernetesEmulator,
    base: str,
    scs: dict[str, Sidecar],
    until: Callable[..., Awaitable[Any]],
) -> None:
    def leaders() -> list[str]:
        return [pod for pod, sc in scs.items() if sc.is_leader()]

    first = (await until(lambda: leaders() if len(leaders()) == 1 else None))[0]
    other = next(p for p in scs if p != first)
    doc = scs[first].status()
    assert doc is not None and doc["lock"] == "orders-lock"  # name and password from the API
    await until(lambda: label(api, first) == "true" and label(api, other) == "false")

    async with aiohttp.ClientSession(base) as http:

        async def patch_spec(spec: dict[str, Any]) -> None:
            path = paths.lock(NS, "orders")
            headers = {"Content-Type": "application/merge-patch+json"}
            async with http.patch(path, json={"spec": spec}, headers=headers) as resp:
                assert resp.status == 200, await resp.text()

        # planned hand-off: the spec names the standby as preferred holder
        await patch_spec({"preferredHolder": other})
        await until(lambda: leaders() == [other])
        await until(lambda: label(api, other) == "true" and label(api, first) == "false")

        # paused: the holder keeps its lease, but nobody takes a free lock
        await patch_spec({"paused": True, "preferredHolder": None})
        await until(lambda: scs[first].status()["paused"] is True)  # type: ignore[index]
        scs[other].signal(signal.SIGTERM)
        assert await asyncio.to_thread(scs[other].wait) == 0
        await asyncio.sleep(1.0)
        assert leaders() == []
        assert label(api, other) == "false"  # set on the way out
        await patch_spec({"paused": False})
        await until(lambda: leaders() == [first])
        await until(lambda: label(api, first) == "true")

        # spec.replicas 1 on a master without replicas: the leader steps down and nobody leads
        # (every grant fails closed) until the spec asks for no WAIT again
        await patch_spec({"replicas": 1})
        await until(lambda: "only 0 of 1 replicas confirmed" in scs[first].log())
        assert leaders() == []
        await patch_spec({"replicas": 0})
        await until(lambda: leaders() == [first])
    log = scs[first].log()
    assert "pw-from-secret" not in log and '"configuration applied"' in log


def sentinel_lock(api: kmock.KubernetesEmulator, port: int) -> str:
    """Declare DistributedLock ``orders`` on the Sentinel at ``port`` with Secret
    ``redis-auth``; its node URL."""
    url = f"redis+sentinel://127.0.0.1:{port}/mymaster"
    api.objects[DLOCKS, NS, "orders"] = {
        "metadata": {"name": "orders", "namespace": NS, "generation": 1},
        "spec": {"keys": ["orders"], "nodes": [{"url": url}],
                 "auth": {"secretRef": {"name": "redis-auth"}}},
    }  # fmt: skip
    return url


@pytest.mark.parametrize(
    ("allowed", "refusal"),
    [
        ("sentinel:mymaster, redis+sentinel://good:26379/mymaster", "spec.nodes"),
        (
            "redis+sentinel://127.0.0.1:{sentinel}/mymaster",
            "named master redis://127.0.0.1:{master}",
        ),
    ],
    ids=["attackers-sentinel", "master-not-allowed"],
)
async def test_lock_ref_sends_the_password_only_where_the_secret_consents(
    allowed: str, refusal: str
) -> None:
    """A lock names a Sentinel by an allowed service name but on the attacker's host, or an
    allowed Sentinel names a master the Secret does not allow: the sidecar reads the Secret
    and sends its password to neither (the fake master and Sentinel record every byte)."""
    password = b"pw-consent-only"
    async with (
        listening(Recorder(refuse)) as master,
        listening(Recorder(sentinel_naming(master.port))) as sentinel,
        kmock.KubernetesEmulator() as api,
        kmock.Server(api) as srv,
    ):
        api.resources["v1/secrets"] = kmock.ResourceInfo(kind="Secret", namespaced=True)
        api.resources[DLOCKS] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        note = allowed.format(sentinel=sentinel.port)
        api.objects["v1/secrets", NS, "redis-auth"] = {
            "metadata": {"name": "redis-auth", "namespace": NS,
                         "labels": {"redlease.dev/credentials": "true"},
                         "annotations": {"redlease.dev/allowed-nodes": note}},
            "data": {"password": base64.b64encode(password).decode()},
        }  # fmt: skip
        sentinel_lock(api, sentinel.port)
        extra = ["--lock-ref", "orders", "--kube-api", f"http://127.0.0.1:{srv.port}"]
        sc = Sidecar("pod-a", "", [], environ=env(POD_NAME="pod-a", POD_NAMESPACE=NS), extra=extra)
        sc.start()
        try:
            await until(lambda: refusal.format(master=master.port) in sc.log(), timeout=30)
        finally:
            sc.stop()
    assert master.received == b""
    assert password not in sentinel.received and password.decode() not in sc.log()
    if refusal == "spec.nodes":
        assert sentinel.received == b""  # the attacker's Sentinel is not even asked


async def test_an_injected_sidecar_checks_the_master_a_sentinel_names() -> None:
    """An injected sidecar has its password from its environment (it never reads the Secret):
    the masters the Secret allows come with its arguments (``--allowed-master``), and a
    Sentinel naming any other master gets nothing sent to that master."""
    password = "pw-injected"
    async with (
        listening(Recorder(refuse)) as master,
        listening(Recorder(sentinel_naming(master.port))) as sentinel,
        kmock.KubernetesEmulator() as api,
        kmock.Server(api) as srv,
    ):
        api.resources[DLOCKS] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        url = sentinel_lock(api, sentinel.port)
        extra = ["--lock-ref", "orders", "--kube-api", f"http://127.0.0.1:{srv.port}",
                 f"--pinned-node={url}", "--allowed-master=redis://10.0.0.7:6379"]  # fmt: skip
        environ = env(POD_NAME="pod-a", POD_NAMESPACE=NS, REDLEASE_PASSWORD=password)
        sc = Sidecar("pod-a", "", [], environ=environ, extra=extra)
        sc.start()
        try:
            await until(lambda: f"named master redis://127.0.0.1:{master.port}" in sc.log(), 30)
        finally:
            sc.stop()
    assert master.received == b""
    assert password.encode() not in sentinel.received and password not in sc.log()


@pytest.mark.slow
async def test_spec_holders_is_followed_live_and_labels_every_active_pod(
    redis_server: RedisServer,
) -> None:
    """``spec.holders`` reaches sidecars started with ``--lock-ref``: 1 -> 2 lets a second pod
    lead (both labelled), 2 -> 1 leaves one (a reconfiguration like the others)."""
    pods = ("pod-a", "pod-b", "pod-c")
    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
        api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
        api.resources[DLOCKS] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        for pod in pods:
            api.objects["v1/pods", NS, pod] = {"metadata": {"name": pod, "namespace": NS}}
        api.objects[DLOCKS, NS, "pool"] = {
            "metadata": {"name": "pool", "namespace": NS, "generation": 1},
            "spec": {"keys": ["pool"], "ttlSeconds": 3, "renewDeadlineSeconds": 2,
                     "retryPeriodSeconds": 1,
                     "nodes": [{"url": f"redis://127.0.0.1:{redis_server.port}/0"}]},
        }  # fmt: skip
        base = f"http://127.0.0.1:{srv.port}"
        scs = {
            pod: Sidecar(pod, "", [], extra=["--lock-ref", "pool", "--pod-label",
                                            "--kube-api", base],
                         environ=env(POD_NAME=pod, POD_NAMESPACE=NS)).start()
            for pod in pods
        }  # fmt: skip

        def leaders() -> list[str]:
            return sorted(pod for pod, sc in scs.items() if sc.is_leader())

        try:
            await until(lambda: len(leaders()) == 1)
            path = paths.lock(NS, "pool")
            headers = {"Content-Type": "application/merge-patch+json"}
            async with aiohttp.ClientSession(base) as http:
                async with http.patch(path, json={"spec": {"holders": 2}}, headers=headers) as r:
                    assert r.status == 200, await r.text()
                await until(lambda: len(leaders()) == 2, timeout=30)

                def labelled() -> list[str] | None:
                    """Both leaders now, when every pod's label says so (read in the same
                    poll: the set may still change after a first reading of it)."""
                    two = leaders()
                    right = all(label(api, p) == ("true" if p in two else "false") for p in pods)
                    return two if len(two) == 2 and right else None

                two = await until(labelled, timeout=30)
                doc = scs[two[0]].status()
                assert doc is not None and doc["holders_limit"] == 2
                async with http.patch(path, json={"spec": {"holders": 1}}, headers=headers) as r:
                    assert r.status == 200, await r.text()
                await until(lambda: len(leaders()) == 1, timeout=30)
        finally:
            for sc in scs.values():
                sc.stop()
