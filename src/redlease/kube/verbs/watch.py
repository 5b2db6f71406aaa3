"""WATCH: one DistributedLock's events (the sidecar's ``--lock-ref`` follows its lock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from redlease.kube import paths
from redlease.kube.client import KubeClient


def lock(
    client: KubeClient, namespace: str, name: str, timeout: float
) -> AsyncIterator[dict[str, Any]]:
    """The watch events (``ADDED``, ``MODIFIED`` ...) of the DistributedLock, for at most
    ``timeout`` seconds."""
    return client.stream(paths.lock_watch(namespace, name), timeout)
