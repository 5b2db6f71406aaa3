"""CREATE (POST): a Lease, an Event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redlease.kube import paths
from redlease.kube.client import TIMEOUT, KubeClient


async def lease(
    client: KubeClient, namespace: str, body: Mapping[str, Any], *, timeout: float
) -> Any:
    """Create a Lease (:func:`redlease.kube.lease.new_lease`); 409 if it exists already."""
    return await client.request("POST", paths.leases(namespace), body=body, timeout=timeout)


async def event(
    client: KubeClient, namespace: str, body: Mapping[str, Any], *, timeout: float = TIMEOUT
) -> Any:
    """Post a v1 Event (:func:`redlease.kube.events.event_body`: named when decided, so a
    retried POST is refused 409 instead of stored twice)."""
    return await client.request("POST", paths.events(namespace), body=body, timeout=timeout)
