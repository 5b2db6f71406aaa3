"""DistributedLock keys are scoped to their namespace in Redis (``NAMESPACE#KEY``): two
namespaces with the same key on one Redis each hold their own lease, a force release in one
leaves the other alone, plain ``--lock`` names are unchanged, and only the cluster admin's
Namespace label ``redlease.dev/shared-keys=true`` makes namespaces share a key.

One real redis-server (shared, one password), the operator in kopf and two ``--lock-ref``
sidecars against KMock."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
import kopf
import pytest
import redis

import redlease
from redlease.core.keys import LockKeys, scoped_name
from redlease.devtools.kubeemulator import (
    RESOURCE,
    Emulator,
    KopfThread,
    declare,
    events,
    until,
    watching,
)
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, env
from redlease.errors import KubeError
from redlease.kube import paths
from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient
from redlease.kube.names import CREDENTIALS_LABEL, FORCE_RELEASE_ANNOTATION, SHARED_KEYS_LABEL
from redlease.operator.config import OperatorConfig
from redlease.operator.handlers import build_registry
from redlease.operator.runtime import Runtime
from redlease.operator.secrets import SecretSource
from redlease.sidecar.config import ElectionConfig, LockRef
from redlease.sidecar.lockref import LockRefFollower

A, B = "team-a", "team-b"
KEY = "X"
PASSWORD = "shared-redis-pw"  # noqa: S105 - a throwaway test password


class World:
    """KMock with two namespaces (Namespace objects, Secrets, one DistributedLock each)."""

    def __init__(self, api: Emulator, url: str) -> None:
        self.api = api
        self.url = url
        self.namespaces: dict[str, dict[str, Any]] = {}
        for ns in (A, B):
            self.namespaces[ns] = {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": ns, "labels": {}}}  # fmt: skip
            api[f"get /api/v1/namespaces/{ns}"] << self._serve(ns)

    def _serve(self, ns: str) -> Callable[[], dict[str, Any]]:
        return lambda: self.namespaces[ns]

    def label(self, ns: str, shared: bool) -> None:
        """What only a cluster admin may do: label the Namespace."""
        labels = self.namespaces[ns]["metadata"]["labels"]
        if shared:
            labels[SHARED_KEYS_LABEL] = "true"
        else:
            labels.pop(SHARED_KEYS_LABEL, None)

    async def create(self, ns: str, server: RedisServer) -> None:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "redis-auth", "labels": {CREDENTIALS_LABEL: "true"}},
            "data": {"password": base64.b64encode(PASSWORD.encode()).decode()},
        }
        async with self.api.post(paths.secrets(ns), json=secret) as resp:
            assert resp.status == 201, await resp.text()
        lock = {
            "apiVersion": "redlease.dev/v1alpha1",
            "kind": "DistributedLock",
            "metadata": {"name": "lock", "namespace": ns},
            "spec": {"keys": [KEY], "nodes": [{"url": f"redis://127.0.0.1:{server.port}/0"}],
                     "ttlSeconds": 3, "renewDeadlineSeconds": 2, "retryPeriodSeconds": 1,
                     "auth": {"secretRef": {"name": "redis-auth"}}},
        }  # fmt: skip
        path = paths.locks(ns)
        async with self.api.post(path, json=lock) as resp:
            assert resp.status == 201, await resp.text()

    async def annotate(self, ns: str, key: str, value: str) -> None:
        path = paths.lock(ns, "lock")
        patch = {"metadata": {"annotations": {key: value}}}
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.api.patch(path, json=patch, headers=headers) as resp:
            assert resp.status == 200, await resp.text()

    def status(self, ns: str) -> dict[str, Any]:
        return dict(self.api.objects[RESOURCE, ns, "lock"].raw.get("status") or {})

    def annotations(self, ns: str) -> dict[str, Any]:
        meta = self.api.objects[RESOURCE, ns, "lock"].raw.get("metadata") or {}
        return dict(meta.get("annotations") or {})


@pytest.fixture
async def world() -> AsyncIterator[tuple[World, RedisServer]]:
    server = RedisServer(password=PASSWORD).start()
    try:
        async with Emulator() as api, kmock.Server(api) as srv:
            declare(api)
            url = str(srv.url).rstrip("/")
            w = World(api, url)
            for ns in (A, B):
                await w.create(ns, server)
            kube = KubeClient(ClusterAuth(url))
            runtime = Runtime(
                OperatorConfig(namespaces=(A, B), refresh=0.3, node_timeout=1.0),
                secrets=SecretSource(kube, ttl=0.0),
            )
            registry = build_registry(runtime, kopf.OperatorRegistry())
            async with KopfThread(registry, url, A, namespaces=(A, B)) as kopf_thread:
                await until(lambda: watching(api) or kopf_thread.error, what="kopf's watch")
                assert kopf_thread.error is None, kopf_thread.error
                yield w, server
    finally:
        server.stop()


def sidecar(ns: str, url: str) -> Sidecar:
    pod = f"pod-{ns}"
    sc = Sidecar(pod, "", [], extra=["--lock-ref", "lock", "--kube-api", url],
                 environ=env(POD_NAME=pod, POD_NAMESPACE=ns))  # fmt: skip
    sc.lock = KEY  # the state file keeps the user's key
    return sc.start()


def lease(server: RedisServer, name: str) -> dict[bytes, bytes]:
    record: dict[Any, Any] = server.client().hgetall(LockKeys.for_name(name).lease)
    return record


@pytest.mark.slow
async def test_two_namespaces_with_one_key_on_one_redis_never_share_it(
    world: tuple[World, RedisServer],
) -> None:
    w, server = world
    scs = {ns: sidecar(ns, w.url) for ns in (A, B)}
    try:
        # each namespace's sidecar leads its own lease of X, at the same time
        for ns, sc in scs.items():
            await until(lambda sc=sc: asyncio.to_thread(sc.is_leader), what=f"{ns} leads")
        for ns in (A, B):
            assert lease(server, scoped_name(ns, KEY))[b"holder"] == f"pod-{ns}".encode()
            doc = scs[ns].status() or {}
            assert doc["lock"] == KEY and doc["keys"] == [KEY] and doc["leader"] is True
            assert (scs[ns].state_dir / f"{KEY}.json").exists()
            await until(lambda ns=ns: w.status(ns).get("holder") == f"pod-{ns}", what="status")
            assert w.status(ns)["keys"] == KEY
        assert server.client().exists(f"redlease:{{{KEY}}}") == 0

        # plain --lock X (the library, no DistributedLock) is the unscoped name, as before
        plain = redlease.Lock(server.client(), KEY, ttl=30, identity="plain")
        assert plain.acquire(blocking=False)
        assert lease(server, KEY)[b"holder"] == b"plain"

        # force release in A removes A's lease only: B's holder, token and term are untouched
        before_b = lease(server, scoped_name(B, KEY))
        token_a = int(lease(server, scoped_name(A, KEY))[b"fence"])
        await w.annotate(A, FORCE_RELEASE_ANNOTATION, "test")
        await until(lambda: FORCE_RELEASE_ANNOTATION not in w.annotations(A), what="released")
        assert any(e.get("reason") == "ForceReleased" for e in events(w.api, A))
        # A's sidecar re-takes its own lease with a new token
        await until(
            lambda: int(lease(server, scoped_name(A, KEY)).get(b"fence", 0)) > token_a,
            what="A re-acquired",
        )
        after_b = lease(server, scoped_name(B, KEY))
        for field in (b"holder", b"fence", b"token", b"acquired"):
            assert after_b.get(field) == before_b.get(field), field
        assert scs[B].is_leader()
        assert not any(e.get("reason") == "ForceReleased" for e in events(w.api, B))
        assert lease(server, KEY)[b"holder"] == b"plain"  # the global X too
        plain.release()

        # the cluster admin shares both namespaces' keys: one lease of X, one leader of both
        for ns in (A, B):
            w.label(ns, shared=True)
            await w.annotate(ns, "touch", "1")  # the sidecars re-read on a change (or resync)

        def leaders() -> list[str]:
            return [ns for ns, sc in scs.items() if sc.is_leader()]

        def single() -> list[str] | None:
            # one sidecar leads, and it is the holder of the one shared lease (while the two
            # re-read their lock, the other may still lead on its old, scoped name)
            now = leaders()
            agreed = len(now) == 1 and lease(server, KEY).get(b"holder") == f"pod-{now[0]}".encode()
            return now if agreed else None

        one = await until(
            lambda: asyncio.to_thread(single),
            timeout=30,
            what="one leader across both namespaces, holding the shared lease",
        )
        for ns in (A, B):
            await until(
                lambda ns=ns: w.status(ns).get("holder") == f"pod-{one[0]}", what=f"{ns} status"
            )
        for _ in range(5):  # and it stays one
            await asyncio.sleep(0.3)
            assert await asyncio.to_thread(leaders) == one
    finally:
        for sc in scs.values():
            sc.stop()


async def test_the_sidecar_takes_the_scope_from_the_namespace_and_never_guesses() -> None:
    """``--lock-ref``: the Namespace's label decides (no label, or no Namespace: scoped); a
    Namespace it may not read stops the read instead of falling back to either scope."""
    spec = {"keys": [KEY], "nodes": [{"url": "redis://127.0.0.1:1/0"}]}
    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
        api.resources[RESOURCE] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        for ns in ("plain", "shared", "missing", "forbidden"):
            api.objects[RESOURCE, ns, "lock"] = {"metadata": {"name": "lock", "namespace": ns},
                                                 "spec": spec}  # fmt: skip
        api["get /api/v1/namespaces/plain"] << {"metadata": {"name": "plain", "labels": {}}}
        api["get /api/v1/namespaces/shared"] << {
            "metadata": {"name": "shared", "labels": {SHARED_KEYS_LABEL: "true"}}
        }
        api["get /api/v1/namespaces/forbidden"] << 403 << {"kind": "Status", "code": 403}
        client = KubeClient(ClusterAuth(str(srv.url).rstrip("/")))
        try:

            async def read(ns: str) -> ElectionConfig:
                follower = LockRefFollower(client, LockRef(ns, "lock"), "pod-0", lambda _: None)
                return await follower.read()

            assert (await read("plain")).redis_keys == (f"plain#{KEY}",)
            assert (await read("missing")).redis_keys == (f"missing#{KEY}",)
            shared = await read("shared")
            assert shared.redis_keys == (KEY,) and shared.lock == KEY
            with pytest.raises(KubeError, match="namespaces/forbidden: HTTP 403"):
                await read("forbidden")
        finally:
            await client.close()


def test_a_namespace_redis_user_reaches_only_its_own_scoped_keys() -> None:
    """The hard boundary docs/operator.md recommends: a Redis ACL user per namespace whose key
    pattern is ``redlease:{NAMESPACE#*`` holds its own scoped lock and is refused another
    namespace's (and a plain, unscoped name)."""
    server = RedisServer().start()
    try:
        admin = server.client()
        major = int(str(admin.info("server")["redis_version"]).split(".")[0])
        node = "%R~redlease:node" if major >= 7 else "~redlease:node"  # read-only keys: Redis 7
        admin.execute_command(
            "ACL", "SETUSER", A, "on", ">pw-a", f"~redlease:{{{A}#*", node, "+@all"
        )
        client = redis.Redis(host="127.0.0.1", port=server.port, username=A, password="pw-a")
        own = redlease.Lock(client, scoped_name(A, KEY), ttl=5, identity="a").acquire()
        assert own.fencing_token > 0
        for other in (scoped_name(B, KEY), KEY):
            with pytest.raises(redlease.LockError, match="permission denied by ACL"):
                redlease.Lock(client, other, ttl=5, identity="a").acquire(blocking=False)
        client.close()
    finally:
        server.stop()
