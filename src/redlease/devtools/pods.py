"""Pod parts for the injection tests and the webhook's measurement: app containers that pass the
restricted Pod Security level themselves, so that whatever fails the check after injection is
the injector's, and a Deployment's pod as the webhook receives it."""

from __future__ import annotations

import copy
from typing import Any

from redlease.kube.sidecar_args import SERVICE_ACCOUNT_DIR
from redlease.operator.injection import LOCK_ANNOTATION

LOCK_SPEC = {
    "keys": ["orders"],
    "nodes": [{"url": "redis://redis.infra:6379/0"}],
    "auth": {"secretRef": {"name": "redis-auth"}},
}
API_ACCESS = "kube-api-access-x7k2p"  # what the service-account admission plugin adds
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def app_container(name: str = "app", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "example/app:1",
        "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
        **extra,
    }


def pod_spec(**extra: Any) -> dict[str, Any]:
    return {
        "securityContext": copy.deepcopy(RESTRICTED_POD),
        "containers": [app_container()],
        **extra,
    }


def deployment_container(name: str = "app", **extra: Any) -> dict[str, Any]:
    """An app container as a Deployment's would look (image, args, a port, env)."""
    defaults: dict[str, Any] = {
        "image": "example/app:1.4",
        "args": ["serve", "--port=8080"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": "MODE", "value": "prod"}],
    }
    return app_container(name, **{**defaults, **extra})


def deployment_pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as a Deployment's ReplicaSet creates it, after the built-in admission plugins: no
    name or namespace yet, and the service-account token volume mounted into every container."""
    token_mount = {"name": API_ACCESS, "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "orders-7d9f8c6b5-",
            "labels": {"app": "orders", "pod-template-hash": "7d9f8c6b5"},
            "annotations": {LOCK_ANNOTATION: "orders"} if annotations is None else annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "orders-7d9f8c6b5",
                    "uid": "5c1b2f8e-0000-4000-8000-000000000001",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "serviceAccountName": "redlease-sidecar",
            "securityContext": copy.deepcopy(RESTRICTED_POD),
            "containers": [deployment_container(volumeMounts=[token_mount])],
            "volumes": [
                {
                    "name": API_ACCESS,
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
                        ],
                    },
                }
            ],
        },
    }


def kubelet_probe(probe: dict[str, Any], host: str = "127.0.0.1") -> tuple[bool, str]:
    """Run an ``httpGet`` probe as the kubelet does: GET ``host:port`` + ``path`` (``host``
    stands in for the pod IP), success on a status from 200 to 399, failure on anything else,
    a refused connection or no answer within ``timeoutSeconds`` (default 1). Returns (ok, why)."""
    import http.client

    get = probe["httpGet"]
    timeout = float(probe.get("timeoutSeconds", 1))
    conn = http.client.HTTPConnection(host, int(get["port"]), timeout=timeout)
    try:
        conn.request("GET", get["path"], headers={"User-Agent": "kube-probe/1.31"})
        status = conn.getresponse().status
    except OSError as exc:
        return False, type(exc).__name__
    except http.client.HTTPException as exc:
        return False, type(exc).__name__
    finally:
        conn.close()
    return 200 <= status < 400, f"HTTP {status}"
