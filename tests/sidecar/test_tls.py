"""Redis TLS with a CA of our own and client certificates (mTLS), for the sidecar and `status`.

A real redis-server requiring client certificates; the CA and the certificates are made by the
test. The sidecar gets them by flags, or reads them from Secrets named by the DistributedLock's
``spec.tls`` (``--lock-ref``, against KMock). A wrong CA fails closed: the sidecar never leads
and says why in one line naming the node; `redlease status` exits 1, its node line says why.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import kmock
import pytest

from redlease.devtools.sidecarprocs import ROOT, Sidecar, env, until, wait_until
from redlease.devtools.tlsredis import TlsRedis
from redlease.kube.names import CREDENTIALS_LABEL

NS = "shop"
DLOCKS = "redlease.dev/v1alpha1/distributedlocks"


def tls_flags(tls: TlsRedis, ca: str = "ca") -> list[str]:
    return [
        f"--tls-ca-file={tls.files[ca]}",
        f"--tls-cert-file={tls.files['cert']}",
        f"--tls-key-file={tls.files['key']}",
    ]


def test_sidecar_with_ca_and_client_certificate_flags(
    tls_redis: TlsRedis, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    good = sidecars("tls-a", lock_name, [tls_redis.url], extra=tls_flags(tls_redis))
    wait_until(good.is_leader, 20)
    holder = tls_redis.server.client().hget(f"redlease:{{{lock_name}}}", "holder")
    assert holder == b"tls-a"  # the lease really is in the TLS server

    wrong = sidecars("tls-b", lock_name, [tls_redis.url], extra=tls_flags(tls_redis, "wrong_ca"))
    wait_until(lambda: "redis unavailable" in wrong.log(), 20)
    good.signal(15)
    assert good.wait() == 0
    status = wrong.status()
    assert status is not None and not status["leader"]
    lines = [line for line in wrong.log().splitlines() if "redis unavailable" in line]
    assert len(lines) == 1  # one line, however long it fails
    assert tls_redis.node in lines[0] and "certificate verify failed" in lines[0]
    assert "Traceback" not in wrong.log()


def test_status_with_a_wrong_ca_is_one_line_naming_the_node(tls_redis: TlsRedis) -> None:
    base = [sys.executable, "-m", "redlease", "status", "--lock", "x", "--redis", tls_redis.url]
    ok = subprocess.run(
        [*base, *tls_flags(tls_redis)], capture_output=True, text=True, env=env(), cwd=ROOT,
        timeout=60,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [*base, *tls_flags(tls_redis, "wrong_ca")], capture_output=True, text=True, env=env(),
        cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1, bad.stdout + bad.stderr  # unreachable: the status says why
    (line,) = [ln for ln in bad.stdout.splitlines() if "certificate verify failed" in ln]
    assert tls_redis.node in line and "Traceback" not in bad.stdout + bad.stderr
    flags = subprocess.run(
        [*base, "--tls-cert-file", str(tls_redis.files["cert"])],
        capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert flags.returncode == 2 and "--tls-key-file: give both" in flags.stderr


@pytest.mark.slow
async def test_lock_ref_reads_ca_and_client_certificate_from_secrets(tls_redis: TlsRedis) -> None:
    """No TLS flags: the sidecar reads spec.tls's Secrets through the API (client key into an
    anonymous memory file, never on disk); a CA Secret that did not opt in is refused."""
    async with kmock.KubernetesEmulator() as api, kmock.Server(api) as srv:
        api.resources["v1/secrets"] = kmock.ResourceInfo(kind="Secret", namespaced=True)
        api.resources[DLOCKS] = kmock.ResourceInfo(kind="DistributedLock", namespaced=True)
        api.objects["v1/secrets", NS, "redis-ca"] = tls_redis.secret("redis-ca", {"ca.crt": "ca"})
        api.objects["v1/secrets", NS, "client"] = tls_redis.secret(
            "client", {"tls.crt": "cert", "tls.key": "key"}
        )
        unlabelled = tls_redis.secret("other-ca", {"ca.crt": "ca"}, consent=False)
        api.objects["v1/secrets", NS, "other-ca"] = unlabelled
        for name, ca in (("orders", "redis-ca"), ("refused", "other-ca")):
            api.objects[DLOCKS, NS, name] = {
                "metadata": {"name": name, "namespace": NS},
                "spec": {
                    "keys": [f"{name}-lock"],
                    "ttlSeconds": 3,
                    "retryPeriodSeconds": 1,
                    "nodes": [{"url": tls_redis.url}],
                    "tls": {
                        "caSecretRef": {"name": ca},
                        "clientCertSecretRef": {"name": "client"},
                    },
                },
            }
        base = f"http://127.0.0.1:{srv.port}"
        scs = [
            Sidecar(name, "", [], extra=["--lock-ref", name, "--kube-api", base],
                    environ=env(POD_NAME=name, POD_NAMESPACE=NS)).start()
            for name in ("orders", "refused")
        ]  # fmt: skip
        try:
            await until(scs[0].is_leader, 30, "the sidecar leads over TLS")
            await until(lambda: "has not opted in" in scs[1].log(), 30, "refused")
            assert not scs[1].is_leader()
            text = scs[1].log()
            assert "spec.tls.caSecretRef.name" in text and CREDENTIALS_LABEL in text
            for sc in scs:
                assert "BEGIN" not in sc.log()  # no PEM in any log line
        finally:
            for sc in scs:
                sc.stop()
