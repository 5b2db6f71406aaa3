"""The settings of ``redlease operator`` (validated by the CLI) and the API client they make.
Imported lazily by :mod:`redlease.operator` (``OperatorConfig``)."""

from __future__ import annotations

from dataclasses import dataclass

from redlease.errors import ConfigError
from redlease.kube.auth import Login
from redlease.kube.client import KubeClient
from redlease.kube.leaselock import LeaseElectionConfig
from redlease.operator import webhook


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """Validated settings of ``redlease operator`` (the CLI builds it)."""

    namespaces: tuple[str, ...] = ()
    clusterwide: bool = False
    liveness: str | None = None
    refresh: float = 5.0
    concurrency: int = 16  # Redis nodes read at once
    api_requests: int = 16  # the refresh cycle's API requests in flight (patches, Events, reads)
    node_timeout: float = 3.0
    verbose: bool = False
    metrics: tuple[str, int] | None = None  # (host, port) of /metrics; None: not served
    webhook: webhook.WebhookConfig | None = None  # sidecar injection; None: not served
    election: LeaseElectionConfig | None = None  # several replicas, one active; None: just one
    kube: Login | None = None  # the API server and credentials (kopf's login too)


def api_client(config: OperatorConfig) -> KubeClient:
    """The operator's Kubernetes API client (the Secret, Namespace, DistributedLock and Lease
    reads and writes that are not kopf's own)."""
    if config.kube is None:
        raise ConfigError("KUBECONFIG", "no Kubernetes API configured")
    return KubeClient(config.kube)


def lock_timeout(config: OperatorConfig) -> float:
    """Seconds for the webhook's DistributedLock GET."""
    return config.webhook.lock_timeout if config.webhook else 2.0


__all__ = ["OperatorConfig", "api_client", "lock_timeout"]
