"""Redis TLS with a CA and a client certificate from Secrets (``spec.tls``): the operator, and
pods the webhook injects, against a real redis-server that requires client certificates.

The operator reads the Secrets (they must consent, like credentials) and reaches the node; a
wrong CA fails closed: phase Unavailable, and the condition and the NodeLost Event name the
node. The webhook mounts the Secrets into the sidecar only (the kubelet reads them) and passes
the files by flag; the injected sidecar, started as the kubelet would start it, leads.

Stand-ins: the Secret volumes become files in a temporary directory substituted for their
mount path in the arguments (as the state volume in test_injected_sidecar.py).
"""

from __future__ import annotations

import asyncio
import copy
import tempfile
from pathlib import Path
from typing import Any

import jsonpatch
import kmock
import pytest
from test_injected_sidecar import Started, _status, resolve_env, template

from redlease.devtools.kubeemulator import NAMESPACE, RESOURCE, Cluster, events, until
from redlease.devtools.sidecarprocs import env
from redlease.devtools.tlsredis import TlsRedis
from redlease.devtools.webhookharness import running_webhook
from redlease.kube import paths
from redlease.operator.injection import SIDECAR_NAME, TLS_DIR


def tls_spec(tls: TlsRedis, ca_secret: str, key: str) -> dict[str, Any]:
    return {
        "keys": [key],
        "ttlSeconds": 3,
        "retryPeriodSeconds": 1,
        "nodes": [{"url": tls.url}],
        "tls": {"caSecretRef": {"name": ca_secret}, "clientCertSecretRef": {"name": "client"}},
    }


async def add_secret(cluster: Cluster, body: dict[str, Any]) -> None:
    async with cluster.api.post(paths.secrets(NAMESPACE), json=body) as resp:
        assert resp.status == 201, await resp.text()


async def test_operator_reaches_the_node_with_the_secrets_ca_and_fails_closed_without(
    cluster: Cluster, tls_redis: TlsRedis
) -> None:
    await add_secret(cluster, tls_redis.secret("redis-ca", {"ca.crt": "ca"}))
    await add_secret(cluster, tls_redis.secret("wrong-ca", {"ca.crt": "wrong_ca"}))
    await add_secret(cluster, tls_redis.secret("client", {"tls.crt": "cert", "tls.key": "key"}))
    await add_secret(cluster, tls_redis.secret("unlabelled", {"ca.crt": "ca"}, consent=False))
    await cluster.create("good", tls_spec(tls_redis, "redis-ca", "good"))
    await cluster.create("wrong", tls_spec(tls_redis, "wrong-ca", "wrong"))
    await cluster.create("refused", tls_spec(tls_redis, "unlabelled", "refused"))

    await until(lambda: cluster.status("good").get("phase") == "Free", what="good: Free")
    assert cluster.status("good")["healthyNodes"] == 1

    await until(lambda: cluster.status("wrong").get("phase") == "Unavailable", what="wrong")
    status = cluster.status("wrong")
    assert status["unhealthyNodes"] == [tls_redis.node]
    (available,) = [c for c in status["conditions"] if c["type"] == "Available"]
    assert tls_redis.node in available["message"]
    assert "certificate verify failed" in available["message"]
    lost = await until(
        lambda: [e for e in events(cluster.api, NAMESPACE) if e.get("reason") == "NodeLost"],
        what="NodeLost",
    )
    assert tls_redis.node in lost[0]["message"]

    await until(lambda: cluster.status("refused").get("phase") == "Invalid", what="refused")
    (valid,) = cluster.status("refused")["conditions"]
    assert valid["message"].startswith("spec.tls.caSecretRef.name: Secret 'unlabelled'")
    for name in ("good", "wrong", "refused"):
        assert "BEGIN" not in str(cluster.status(name))


@pytest.mark.slow
async def test_injected_sidecar_gets_the_tls_secrets_as_files(
    tls_redis: TlsRedis, tmp_path: Path
) -> None:
    spec = tls_spec(tls_redis, "redis-ca", "orders-lock")
    async with running_webhook(tmp_path) as hook:
        hook.add_lock("orders", spec)
        hook.add_secret("redis-ca", {"ca.crt": tls_redis.pem["ca"]})
        pem = tls_redis.pem
        hook.add_secret("client", {"tls.crt": pem["cert"], "tls.key": pem["key"]})
        pod = template(4140)
        answer = await hook.ask(pod)
        assert answer.allowed and answer.warnings == [], answer
        patched = jsonpatch.apply_patch(pod, answer.patch)
        # a CA Secret that did not consent is not mounted: admitted with a warning
        hook.add_secret("redis-ca", {"ca.crt": tls_redis.pem["ca"]}, consent=False)
        refused = await hook.ask(template(4141))
        assert refused.allowed and "does not consent" in refused.warnings[0]
        unwired = jsonpatch.apply_patch(template(4141), refused.patch)
        assert not [v for v in unwired["spec"]["volumes"] if "secret" in v]
    patched["metadata"].update(name="orders-0", namespace=NAMESPACE)
    (container,) = [c for c in patched["spec"]["initContainers"] if c["name"] == SIDECAR_NAME]
    volumes = {v["name"]: v["secret"] for v in patched["spec"]["volumes"] if "secret" in v}
    assert {v["secretName"] for v in volumes.values()} == {"redis-ca", "client"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert set(volumes) <= set(mounts)
    for app in patched["spec"]["containers"]:  # the app containers never see the key
        assert not set(volumes) & {m["name"] for m in app.get("volumeMounts", [])}

    # the kubelet: each Secret volume's items become files under its mount path
    root = Path(tempfile.mkdtemp(prefix="redlease-tls-vol-", dir=tmp_path))
    entries = {"redis-ca": {"ca.crt": "ca"}, "client": {"tls.crt": "cert", "tls.key": "key"}}
    for name, secret in volumes.items():
        for item in secret["items"]:
            target = root / mounts[name].removeprefix(TLS_DIR + "/") / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(tls_redis.pem[entries[secret["secretName"]][item["key"]]])
    container = copy.deepcopy(container)
    container["args"] = [a.replace(TLS_DIR, str(root)) for a in container["args"]]
    assert any(a.startswith("--tls-key-file=") for a in container["args"])

    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
        api.resources[RESOURCE] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        api.objects[RESOURCE, NAMESPACE, "orders"] = {
            "metadata": {"name": "orders", "namespace": NAMESPACE},
            "spec": spec,
        }
        environ = env(
            **resolve_env(container, patched, {}), REDLEASE_KUBE_API=f"http://127.0.0.1:{srv.port}"
        )
        state = Path(tempfile.mkdtemp(prefix="redlease-injected-", dir=tmp_path))
        started = Started(container, environ, state)
        try:
            await until(
                lambda: asyncio.to_thread(lambda: _status(started).get("leader")),
                timeout=30,
                what="the injected sidecar leads over mTLS",
            )
            requests = list(api._requests)
            assert not [r for r in requests if r.resource and r.resource.plural == "secrets"]
        finally:
            started.stop()
