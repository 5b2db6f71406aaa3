"""The injected sidecar runs: the webhook patches two replicas of a Deployment's pod, then each
patched sidecar container is started as the kubelet would start it -- its command line as
injected, its env resolved as the pod gets it (downward API, secretKeyRef) -- against a real
password-protected redis-server and the DistributedLock in KMock. One leads; its pod label
follows; the sidecar never reads the Secret through the API; the injected httpGet probes answer.

Stand-ins (what this cannot check): the volume mounts become a temporary directory substituted
for the mount path in the arguments, the API address comes from REDLEASE_KUBE_API instead of
in-cluster config (so the projected token is not used), and probes are run by the test, not by
a kubelet.
"""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import kmock
import pytest

from redlease.core.keys import LockKeys, scoped_name
from redlease.devtools.kubeemulator import NAMESPACE, RESOURCE
from redlease.devtools.kubeemulator import until as harness_until
from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.pods import kubelet_probe
from redlease.devtools.sidecarprocs import ROOT, env
from redlease.devtools.webhookharness import running_webhook
from redlease.kube import paths
from redlease.kube.names import CREDENTIALS_LABEL, LEADER_LABEL
from redlease.operator.injection import (
    API_LOCKS_ANNOTATION,
    HTTP_PORT_ANNOTATION,
    LOCK_ANNOTATION,
    POD_LABEL_ANNOTATION,
    PROBE_PORT_ANNOTATION,
    SIDECAR_NAME,
    STATE_DIR,
)

PASSWORD = "pw-from-secret"


def lock_spec(server: RedisServer) -> dict[str, Any]:
    return {
        "keys": ["orders-lock"],
        "ttlSeconds": 3,
        "renewDeadlineSeconds": 2,
        "retryPeriodSeconds": 1,
        "nodes": [{"url": f"redis://127.0.0.1:{server.port}/0"}],
        "auth": {"secretRef": {"name": "redis-auth"}},
    }


def template(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "orders-5f7c9-",
            "labels": {"app": "orders"},
            "annotations": {
                LOCK_ANNOTATION: "orders",
                POD_LABEL_ANNOTATION: "true",
                HTTP_PORT_ANNOTATION: str(port),
                PROBE_PORT_ANNOTATION: str(free_port()),  # two "pods" share this host
            },
        },
        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]},
    }


def resolve_env(
    container: dict[str, Any], pod: dict[str, Any], secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The container's env as the kubelet resolves it."""
    out: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            out[item["name"]] = item["value"]
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            out[item["name"]] = {
                "metadata.name": pod["metadata"]["name"],
                "metadata.namespace": pod["metadata"]["namespace"],
            }[path]
        else:
            ref = source["secretKeyRef"]
            data = secrets[ref["name"]]
            if ref["key"] in data:
                out[item["name"]] = data[ref["key"]]
            else:
                assert ref.get("optional"), f"the kubelet would not start it: no {ref}"
    return out


class Started:
    """One injected sidecar container, started like the kubelet would."""

    def __init__(self, container: dict[str, Any], environ: dict[str, str], state: Path) -> None:
        self.container = container
        args = [
            a.replace(f"--state-dir={STATE_DIR}", f"--state-dir={state}") for a in container["args"]
        ]
        self.log = state.parent / f"{state.name}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "redlease", *args],  # the image's ENTRYPOINT is redlease
                env=environ,
                stdout=log,
                stderr=log,
                cwd=ROOT,
            )

    def probe(self, kind: str) -> tuple[bool, str]:
        """The injected httpGet probe, as the kubelet runs it (127.0.0.1 for the pod IP)."""
        return kubelet_probe(self.container[kind])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def until(predicate: Callable[[], Any], what: str) -> Awaitable[Any]:
    """Poll in a thread (the predicate runs probes) so the loop keeps serving KMock."""
    return harness_until(lambda: asyncio.to_thread(predicate), timeout=30.0, what=what)


@pytest.mark.slow
async def test_injected_sidecar_leads(tmp_path: Path) -> None:
    server = RedisServer(password=PASSWORD).start()
    try:
        await scenario(server, tmp_path)
    finally:
        server.stop()


async def scenario(server: RedisServer, tmp_path: Path) -> None:
    secrets = {"redis-auth": {"password": PASSWORD}}
    pods: list[dict[str, Any]] = []
    async with running_webhook(tmp_path) as hook:
        hook.add_lock("orders", lock_spec(server))
        hook.add_secret("redis-auth", secrets["redis-auth"])
        for i in range(2):
            pod = template(free_port())
            answer = await hook.ask(pod)
            assert answer.allowed and answer.warnings == [], answer
            import jsonpatch

            patched = jsonpatch.apply_patch(pod, answer.patch)
            # what the API server stores: a name for generateName, the namespace
            patched["metadata"].update(name=f"orders-5f7c9-{i}", namespace=NAMESPACE)
            pods.append(patched)

    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
        api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
        api.resources["v1/secrets"] = kmock.ResourceInfo(kind="Secret", namespaced=True)
        api.resources[RESOURCE] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        for pod in pods:
            api.objects["v1/pods", NAMESPACE, pod["metadata"]["name"]] = pod
        api.objects["v1/secrets", NAMESPACE, "redis-auth"] = {
            "metadata": {
                "name": "redis-auth",
                "namespace": NAMESPACE,
                "labels": {CREDENTIALS_LABEL: "true"},
            },
            "data": {"password": base64.b64encode(PASSWORD.encode()).decode()},
        }
        api.objects[RESOURCE, NAMESPACE, "orders"] = {
            "metadata": {"name": "orders", "namespace": NAMESPACE, "generation": 1},
            "spec": lock_spec(server),
        }
        kube_api = f"http://127.0.0.1:{srv.port}"
        started: dict[str, Started] = {}
        try:
            for pod in pods:
                (container,) = [
                    c for c in pod["spec"]["initContainers"] if c["name"] == SIDECAR_NAME
                ]
                environ = env(**resolve_env(container, pod, secrets), REDLEASE_KUBE_API=kube_api)
                state = Path(tempfile.mkdtemp(prefix="redlease-injected-", dir=tmp_path))
                started[pod["metadata"]["name"]] = Started(container, environ, state)
            await run_checks(api, started, server)
            await check_nodes_pinned(api, kube_api, started, server)
        finally:
            for sc in started.values():
                sc.stop()


def label(api: kmock.KubernetesEmulator, pod: str) -> str | None:
    labels = api.objects["v1/pods", NAMESPACE, pod].raw["metadata"].get("labels") or {}
    value: str | None = labels.get(LEADER_LABEL)
    return value


async def run_checks(
    api: kmock.KubernetesEmulator, started: dict[str, Started], server: RedisServer
) -> None:
    def leaders() -> list[str]:
        return [name for name, sc in started.items() if sc.probe("startupProbe")[0]
                and _status(sc).get("leader")]  # fmt: skip

    # startup (= readiness in connected mode) succeeds on both: up and connected
    for name, sc in started.items():
        await until(lambda sc=sc: sc.probe("startupProbe")[0], what=f"{name} startup")
        assert sc.probe("readinessProbe")[0]
        assert sc.probe("livenessProbe")[0]
    (leader,) = await until(lambda: leaders() if len(leaders()) == 1 else None, what="one leader")
    standby = next(n for n in started if n != leader)
    assert _status(started[leader])["lock"] == "orders-lock"  # keys from the DistributedLock
    await until(
        lambda: label(api, leader) == "true" and label(api, standby) == "false", what="labels"
    )
    # the credentials came from the env (the Secret via secretKeyRef): never read via the API
    requests = list(api._requests)
    assert not [r for r in requests if r.resource is not None and r.resource.plural == "secrets"]
    assert [
        r for r in requests if r.resource is not None and r.resource.plural == "distributedlocks"
    ]

    # readiness is "connected", not "leader": both Ready; without Redis neither is
    server.pause()
    try:
        for name, sc in started.items():
            await until(lambda sc=sc: not sc.probe("readinessProbe")[0], what=f"{name} unready")
            assert sc.probe("readinessProbe") == (False, "HTTP 503")
            assert sc.probe("livenessProbe")[0]  # alive: no restart for an outage
    finally:
        server.resume()
    for name, sc in started.items():
        await until(lambda sc=sc: sc.probe("readinessProbe")[0], what=f"{name} ready")


def _status(sc: Started) -> dict[str, Any]:
    return _get(sc, "/status")


def _get(sc: Started, path: str) -> dict[str, Any]:
    """The sidecar's JSON answer on its loopback port ({} when it does not answer)."""
    import http.client
    import json

    port = int(next(a for a in sc.container["args"] if a.startswith("--http=")).rsplit(":", 1)[1])
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", path)
        resp = conn.getresponse()
        doc: dict[str, Any] = json.loads(resp.read())
        conn.close()
        return doc
    except (OSError, ValueError):
        return {}


async def check_nodes_pinned(
    api: kmock.KubernetesEmulator, kube_api: str, started: dict[str, Started], server: RedisServer
) -> None:
    """Credentials given at admission are not sent to nodes the lock names later."""
    urls = [n["url"] for n in lock_spec(server)["nodes"]]
    await _set_nodes(kube_api, [*urls, "redis://10.0.0.1:6379/0", "redis://x:1/0"], server)
    for name, sc in started.items():
        await until(
            lambda sc=sc: "not sending its credentials to" in sc.log.read_text(),
            what=f"{name} refuses",
        )
        text = sc.log.read_text()
        assert "10.0.0.1:6379" in text and "DistributedLock spec invalid" in text
        assert _status(sc)["nodes"]["total"] == 1  # the settings it had stay


class Recorder:
    """A fake Redis on loopback: records every connection and every byte it is sent, and
    answers each read with an error (whatever it is asked, it never grants anything)."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = bytearray()
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while data := await reader.read(4096):
            self.received.extend(data)
            writer.write(b"-ERR nope\r\n")
        writer.close()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"


def _health(sc: Started) -> dict[str, Any]:
    return _get(sc, "/healthz")


async def _set_nodes(kube_api: str, urls: list[str], server: RedisServer) -> None:
    """Edit the DistributedLock's spec.nodes through the API, as its writer would."""
    spec = {**lock_spec(server), "nodes": [{"url": u} for u in urls]}
    path = paths.lock(NAMESPACE, "orders")
    headers = {"Content-Type": "application/merge-patch+json"}
    async with (
        aiohttp.ClientSession(kube_api) as http,
        http.patch(path, json={"spec": spec}, headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()


@pytest.mark.slow
async def test_admitted_nodes_are_pinned_across_edits_and_restarts(tmp_path: Path) -> None:
    """The lock's writer points spec.nodes at their own server after admission (while the
    image pulls) and again before a container restart: the sidecar, started with the args the
    webhook injected, refuses both times and the fake never sees a connection or the password."""
    server = RedisServer(password=PASSWORD).start()
    fake = Recorder()
    trap = await fake.start()
    secrets = {"redis-auth": {"password": PASSWORD}}
    try:
        async with running_webhook(tmp_path) as hook:
            hook.add_lock("orders", lock_spec(server))
            hook.add_secret("redis-auth", secrets["redis-auth"])
            pod = template(free_port())
            answer = await hook.ask(pod)
        assert answer.allowed and answer.warnings == [], answer
        import jsonpatch

        pod = jsonpatch.apply_patch(pod, answer.patch)
        pod["metadata"].update(name="orders-5f7c9-0", namespace=NAMESPACE)
        (container,) = [c for c in pod["spec"]["initContainers"] if c["name"] == SIDECAR_NAME]
        (node,) = [n["url"] for n in lock_spec(server)["nodes"]]
        assert f"--pinned-node={node}" in container["args"]

        async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
            api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
            api.resources[RESOURCE] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
            api.objects["v1/pods", NAMESPACE, "orders-5f7c9-0"] = pod
            api.objects[RESOURCE, NAMESPACE, "orders"] = {
                "metadata": {"name": "orders", "namespace": NAMESPACE, "generation": 1},
                "spec": lock_spec(server),
            }
            kube_api = f"http://127.0.0.1:{srv.port}"
            await _set_nodes(kube_api, [trap], server)  # between admission and start
            environ = env(**resolve_env(container, pod, secrets), REDLEASE_KUBE_API=kube_api)

            def start(n: int) -> Started:
                state = tmp_path / f"state-{n}"
                state.mkdir()
                return Started(container, environ, state)

            sc = start(1)
            try:
                error = await until(lambda: _health(sc).get("lock_ref_error"), what="refusal")
                assert error.startswith("spec.nodes: ") and trap in error, error
                assert "not sending its credentials to" in error
                assert not sc.probe("livenessProbe")[0]  # health says so
                assert not sc.probe("startupProbe")[0]  # the app does not start
                # the lock is put back: the sidecar (still retrying) starts on the pinned node
                await _set_nodes(kube_api, [node], server)
                await until(lambda: _status(sc).get("leader"), what="leading on the pinned node")
            finally:
                sc.stop()
            await _set_nodes(kube_api, [trap], server)  # again, before a container restart
            sc = start(2)
            try:
                error = await until(lambda: _health(sc).get("lock_ref_error"), what="refusal")
                assert trap in error and not sc.probe("startupProbe")[0]
                assert "sidecar started" not in sc.log.read_text()
            finally:
                sc.stop()
        assert fake.connections == 0 and PASSWORD.encode() not in fake.received
    finally:
        assert fake.server is not None
        fake.server.close()
        server.stop()


OTHER = "billing"  # a second namespace with the same DistributedLock and the same annotation


def _namespace(name: str) -> Callable[[], dict[str, Any]]:
    """A Namespace without the shared-keys label (KMock calls it for each GET)."""
    return lambda: {"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": {}}}  # fmt: skip


async def _lock_call(port: int, name: str, verb: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://127.0.0.1:{port}/locks/{quote(name, safe='/')}/{verb}", json=body
        ) as resp,
    ):
        return resp.status, await resp.json()


@pytest.mark.slow
async def test_injected_lock_api_names_are_scoped_to_the_pods_namespace(tmp_path: Path) -> None:
    """Two pods in two namespaces, both annotated ``redlease.dev/api-locks: jobs/``, their
    sidecars started with the args the webhook injected, on one Redis: each app locks
    ``jobs/x`` and gets it -- in Redis these are ``apps#jobs/x`` and ``billing#jobs/x``, two
    keys (the namespace scope of DistributedLock keys, core/keys.py ``scoped_name``) -- and no
    name an app can send reaches the other namespace's key (``#`` is refused, names outside the
    prefix are 403). The Namespaces carry no ``redlease.dev/shared-keys`` label."""
    import jsonpatch

    server = RedisServer(password=PASSWORD).start()
    secrets = {"redis-auth": {"password": PASSWORD}}
    namespaces = (NAMESPACE, OTHER)
    pods: dict[str, dict[str, Any]] = {}
    try:
        async with running_webhook(tmp_path) as hook:
            for ns in namespaces:
                hook.add_lock("orders", lock_spec(server), namespace=ns)
                hook.add_secret("redis-auth", secrets["redis-auth"], namespace=ns)
                pod = template(free_port())
                pod["metadata"]["annotations"][API_LOCKS_ANNOTATION] = "jobs/"
                answer = await hook.ask(pod, namespace=ns)
                assert answer.allowed and answer.warnings == [], answer
                patched = jsonpatch.apply_patch(pod, answer.patch)
                patched["metadata"].update(name=f"orders-{ns}", namespace=ns)
                pods[ns] = patched

        async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
            api.resources["v1/pods"] = kmock.ResourceInfo(kind="Pod", namespaced=True)
            api.resources[RESOURCE] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
            for ns in namespaces:
                api[f"get /api/v1/namespaces/{ns}"] << _namespace(ns)
                api.objects["v1/pods", ns, f"orders-{ns}"] = pods[ns]
                api.objects[RESOURCE, ns, "orders"] = {
                    "metadata": {"name": "orders", "namespace": ns, "generation": 1},
                    "spec": lock_spec(server),
                }
            kube_api = f"http://127.0.0.1:{srv.port}"
            started: dict[str, Started] = {}
            ports: dict[str, int] = {}
            try:
                for ns, pod in pods.items():
                    (container,) = [
                        c for c in pod["spec"]["initContainers"] if c["name"] == SIDECAR_NAME
                    ]
                    assert "--api-locks=jobs/" in container["args"]
                    environ = env(
                        **resolve_env(container, pod, secrets), REDLEASE_KUBE_API=kube_api
                    )
                    state = tmp_path / f"state-{ns}"
                    state.mkdir()
                    started[ns] = Started(container, environ, state)
                    ports[ns] = int(pod["metadata"]["annotations"][HTTP_PORT_ANNOTATION])
                await _check_scoped_lock_api(server, ports)
            finally:
                for sc in started.values():
                    sc.stop()
    finally:
        server.stop()


async def _check_scoped_lock_api(server: RedisServer, ports: dict[str, int]) -> None:
    a, b = ports[NAMESPACE], ports[OTHER]
    ask = {"ttl_ms": 30_000}

    async def served(port: int) -> bool:  # 503 until the sidecar has read its lock
        try:
            status, _ = await _lock_call(port, "jobs/probe", "acquire", ask)
        except (aiohttp.ClientError, ValueError):
            return False
        return status == 200

    for port in (a, b):
        await harness_until(lambda port=port: served(port), timeout=30.0, what="the lock API")
    status, got_a = await _lock_call(a, "jobs/x", "acquire", ask)
    assert status == 200, got_a
    status, got_b = await _lock_call(b, "jobs/x", "acquire", ask)
    assert status == 200, got_b  # the same name in another namespace: another key
    client = server.client()
    for ns in (NAMESPACE, OTHER):
        assert client.exists(LockKeys.for_name(scoped_name(ns, "jobs/x")).lease)
    assert not client.exists(LockKeys.for_name("jobs/x").lease)  # never the unscoped name
    # within a namespace it is one lock
    status, held = await _lock_call(a, "jobs/x", "acquire", ask)
    assert status == 409, held
    # no name reaches the other namespace's key: "#" is the scope's, outside the prefix is 403
    for name, code in ((f"jobs/{OTHER}#jobs/x", 400), (f"{OTHER}#jobs/x", 403)):
        status, refused = await _lock_call(a, name, "acquire", ask)
        assert (status, refused.get("field")) == (code, "name"), refused
    status, _ = await _lock_call(a, "jobs/x", "release", {"lease": got_a["lease"]})
    assert status == 200
    assert not client.exists(LockKeys.for_name(scoped_name(NAMESPACE, "jobs/x")).lease)
    assert client.exists(LockKeys.for_name(scoped_name(OTHER, "jobs/x")).lease)
