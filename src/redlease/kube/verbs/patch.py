"""PATCH: a DistributedLock or its status, a Pod (merge patches), a Lease (a JSON patch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redlease.kube import paths
from redlease.kube.client import TIMEOUT, KubeClient

MERGE_PATCH = "application/merge-patch+json"  # RFC 7386: objects merge, null deletes
JSON_PATCH = "application/json-patch+json"  # RFC 6902: operations, a failed ``test`` refuses


async def lock(
    client: KubeClient,
    namespace: str,
    name: str,
    body: Mapping[str, Any],
    *,
    subresource: str = "",
    timeout: float = TIMEOUT,
) -> Any:
    """Merge ``body`` into a DistributedLock (its annotations) or its ``subresource``
    (``status``: the operator's status patches)."""
    path = paths.lock(namespace, name, subresource)
    return await client.request("PATCH", path, body=body, content_type=MERGE_PATCH, timeout=timeout)


async def pod(
    client: KubeClient, namespace: str, name: str, body: Mapping[str, Any], *, timeout: float
) -> Any:
    """Merge ``body`` into a Pod (the sidecar's leader label on its own pod)."""
    path = paths.pod(namespace, name)
    return await client.request("PATCH", path, body=body, content_type=MERGE_PATCH, timeout=timeout)


async def lease(
    client: KubeClient,
    namespace: str,
    name: str,
    ops: Sequence[Mapping[str, Any]],
    *,
    timeout: float,
) -> Any:
    """Apply the JSON patch ``ops`` to a Lease (its writer's compare-and-swap:
    :func:`redlease.kube.lease.cas_patch`)."""
    path = paths.lease(namespace, name)
    return await client.request("PATCH", path, body=ops, content_type=JSON_PATCH, timeout=timeout)
