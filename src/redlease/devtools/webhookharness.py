"""The operator with its injection webhook, over real HTTPS, against KMock.

A test CA (trustme) issues the webhook's certificate; kopf serves it from files as in the chart
(``--webhook-cert``/``--webhook-key``); the client trusts only that CA, as the API server trusts
the ``caBundle``. Requests are AdmissionReview v1 documents as the API server sends them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import trustme

from redlease.devtools.kubeemulator import (
    NAMESPACE,
    RESOURCE,
    Emulator,
    KopfThread,
    declare,
    until,
    watching,
)
from redlease.devtools.localredis import free_port
from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient
from redlease.kube.names import CREDENTIALS_LABEL
from redlease.operator.config import OperatorConfig
from redlease.operator.handlers import build_registry
from redlease.operator.injection import InjectConfig
from redlease.operator.runtime import Runtime
from redlease.operator.secrets import SecretSource
from redlease.operator.webhook import HANDLER_ID, LockSource, WebhookConfig

SERVICE_DNS = "rl-redlease-webhook.ops.svc"


def review(pod: dict[str, Any], namespace: str = NAMESPACE, operation: str = "CREATE") -> Any:
    """An AdmissionReview v1 request for ``pod`` as the API server sends it."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "0f0b1c2d",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


@dataclass
class Answer:
    """The webhook's answer: allowed, the decoded JSON patch, warnings, the status message."""

    uid: str
    allowed: bool
    patch: list[dict[str, Any]]
    warnings: list[str]
    message: str
    code: int | None


def parse_answer(doc: dict[str, Any]) -> Answer:
    resp = doc["response"]
    patch: list[dict[str, Any]] = []
    if "patch" in resp:
        assert resp["patchType"] == "JSONPatch"
        patch = json.loads(base64.b64decode(resp["patch"]))
    status = resp.get("status") or {}
    return Answer(
        resp["uid"],
        resp["allowed"],
        patch,
        list(resp.get("warnings") or []),
        str(status.get("message", "")),
        status.get("code"),
    )


@dataclass
class Webhook:
    """A running operator with its webhook; ``ask`` posts one AdmissionReview."""

    api: Emulator
    url: str
    session: aiohttp.ClientSession

    async def ask(self, pod: dict[str, Any], namespace: str = NAMESPACE) -> Answer:
        request = review(pod, namespace)
        async with self.session.post(self.url, json=request) as resp:
            assert resp.status == 200, await resp.text()
            answer = parse_answer(await resp.json())
        assert answer.uid == request["request"]["uid"]
        return answer

    async def post(self, body: bytes) -> tuple[int, str]:
        """POST raw bytes as the API server would POST a review: (HTTP status, body)."""
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.url, data=body, headers=headers) as resp:
            return resp.status, await resp.text()

    def add_lock(self, name: str, spec: dict[str, Any], namespace: str = NAMESPACE) -> None:
        self.api.objects[RESOURCE, namespace, name] = {
            "apiVersion": "redlease.dev/v1alpha1",
            "kind": "DistributedLock",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": spec,
        }

    def add_secret(
        self,
        name: str,
        data: dict[str, str],
        namespace: str = NAMESPACE,
        consent: bool = True,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """A Secret; ``consent``: labelled redlease.dev/credentials=true (docs/security.md)."""
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if consent:
            meta["labels"] = {CREDENTIALS_LABEL: "true"}
        if annotations:
            meta["annotations"] = annotations
        self.api.objects["v1/secrets", namespace, name] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "data": encoded,
        }


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.asynccontextmanager
async def running_webhook(
    tmp: Path,
    inject: InjectConfig | None = None,
    failure_policy: str = "Ignore",
    locks: type[LockSource] = LockSource,
    lookup_timeout: float = 15.0,
) -> AsyncIterator[Webhook]:
    """The operator's webhook over HTTPS against KMock. The lookups get ``lookup_timeout`` (not
    the 2 s the product uses under the API server's 5 s budget): a busy test machine can make
    KMock slow, and these tests check what is injected, not how fast."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", SERVICE_DNS)
    certfile, keyfile = tmp / "tls.crt", tmp / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    port = free_port()
    hook = WebhookConfig(
        host="127.0.0.1",
        port=port,
        certfile=str(certfile),
        keyfile=str(keyfile),
        failure_policy=failure_policy,
        inject=inject or InjectConfig(),
        lock_timeout=lookup_timeout,
    )
    async with Emulator() as api, kmock.Server(api) as server:
        declare(api)
        url = str(server.url).rstrip("/")
        kube = KubeClient(ClusterAuth(url))
        config = OperatorConfig(namespaces=(NAMESPACE,), refresh=0.3, webhook=hook)
        runtime = Runtime(
            config, secrets=SecretSource(kube, ttl=0.0), locks=locks(kube, timeout=lookup_timeout)
        )
        registry = build_registry(runtime, kopf.OperatorRegistry())
        async with KopfThread(registry, url, NAMESPACE, config) as kopf_thread:
            await until(lambda: watching(api) or kopf_thread.error, what="kopf's watch")
            await until(lambda: _listening(port) or kopf_thread.error, what="the webhook")
            assert kopf_thread.error is None, kopf_thread.error
            context = ssl.create_default_context()
            ca.configure_trust(context)  # trust exactly the CA the test made
            connector = aiohttp.TCPConnector(ssl=context)
            async with aiohttp.ClientSession(connector=connector) as session:
                yield Webhook(api, f"https://127.0.0.1:{port}/{HANDLER_ID}", session)
