"""GET: a DistributedLock, a Namespace, a Secret, a Lease (JSON objects as the API answers)."""

from __future__ import annotations

from typing import Any

from redlease.kube import paths
from redlease.kube.client import TIMEOUT, KubeClient


async def lock(client: KubeClient, namespace: str, name: str, *, timeout: float = TIMEOUT) -> Any:
    """A DistributedLock (the sidecar's ``--lock-ref``, the webhook's lookup)."""
    return await client.request("GET", paths.lock(namespace, name), timeout=timeout)


async def namespace(client: KubeClient, name: str, *, timeout: float = TIMEOUT) -> Any:
    """A Namespace (its labels decide the scope of its locks' keys)."""
    return await client.request("GET", paths.namespace(name), timeout=timeout)


async def secret(client: KubeClient, namespace: str, name: str, *, timeout: float = TIMEOUT) -> Any:
    """A Secret (a lock's credentials or TLS material)."""
    return await client.request("GET", paths.secret(namespace, name), timeout=timeout)


async def lease(client: KubeClient, namespace: str, name: str, *, timeout: float = TIMEOUT) -> Any:
    """A ``coordination.k8s.io`` Lease (its writer's read before a compare-and-swap)."""
    return await client.request("GET", paths.lease(namespace, name), timeout=timeout)
