"""Every Kubernetes API path redlease calls, built in one place (kopf's ``Resource.get_url``).

Pure. The calls themselves are :mod:`redlease.kube.verbs` (one module per verb); the test
harnesses build the paths they write through as the cluster admin here too. Names and
namespaces are quoted (valid Kubernetes names need no quoting: it changes nothing for them, and
keeps a name that slipped through from reaching another path).
"""

from __future__ import annotations

from urllib.parse import quote

from redlease.kube.lease import API_VERSION as LEASE_API_VERSION
from redlease.kube.names import API_VERSION as LOCK_API_VERSION
from redlease.kube.names import PLURAL as LOCK_PLURAL

CORE = "/api/v1"
LOCKS = f"/apis/{LOCK_API_VERSION}"
LEASES = f"/apis/{LEASE_API_VERSION}"


def _path(api: str, namespace: str, plural: str, name: str | None = None, sub: str = "") -> str:
    """``API/namespaces/NAMESPACE/PLURAL[/NAME[/SUB]]``."""
    base = f"{api}/namespaces/{quote(namespace)}/{plural}"
    if name is None:
        return base
    return f"{base}/{quote(name)}" + (f"/{sub}" if sub else "")


def locks(namespace: str) -> str:
    """The namespace's DistributedLocks (the collection: create, watch)."""
    return _path(LOCKS, namespace, LOCK_PLURAL)


def lock(namespace: str, name: str, subresource: str = "") -> str:
    """One DistributedLock, or its ``subresource`` (``status``)."""
    return _path(LOCKS, namespace, LOCK_PLURAL, name, subresource)


def lock_watch(namespace: str, name: str) -> str:
    """A watch of one DistributedLock (its namespace's collection, selected by name)."""
    return f"{locks(namespace)}?watch=true&fieldSelector=metadata.name%3D{quote(name)}"


def leases(namespace: str) -> str:
    """The namespace's ``coordination.k8s.io`` Leases (create)."""
    return _path(LEASES, namespace, "leases")


def lease(namespace: str, name: str) -> str:
    return _path(LEASES, namespace, "leases", name)


def secrets(namespace: str) -> str:
    return _path(CORE, namespace, "secrets")


def secret(namespace: str, name: str) -> str:
    return _path(CORE, namespace, "secrets", name)


def pod(namespace: str, name: str) -> str:
    return _path(CORE, namespace, "pods", name)


def events(namespace: str) -> str:
    """The namespace's v1 Events (create)."""
    return _path(CORE, namespace, "events")


def namespace(name: str) -> str:
    """A Namespace (cluster-scoped)."""
    return f"{CORE}/namespaces/{quote(name)}"
