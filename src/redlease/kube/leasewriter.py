"""The one compare-and-swap writer of a ``coordination.k8s.io/v1`` Lease.

Both Lease writers go through :class:`LeaseWriter`: the operator's own election
(:mod:`redlease.operator.leadership`) and the sidecar's Lease mirror
(:mod:`redlease.sidecar.mirror`). It creates the Lease when there is none and otherwise
replaces its spec with a JSON patch that first tests ``metadata.resourceVersion``
(:func:`~redlease.kube.lease.cas_patch`), so a write lands only on the version the writer read;
:class:`~redlease.errors.KubeConflict` says that someone else wrote first (read again, decide
again). Releasing (:meth:`LeaseWriter.release`) is the same swap, of the record
:meth:`~redlease.kube.lease.LeaseRecord.released` builds, and only while the Lease still names
the releaser.

The HTTP calls sit behind :class:`LeaseStore` (get, create, patch one Lease):
:class:`ApiLeaseStore` makes them with :class:`~redlease.kube.client.KubeClient`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from redlease.errors import KubeConflict, KubeError
from redlease.kube.client import KubeClient
from redlease.kube.lease import (
    CONFLICT_STATUSES,
    LeaseRecord,
    cas_patch,
    lease_path,
    new_lease,
    resource_version,
)

JSON_PATCH = "application/json-patch+json"


class LeaseStore(Protocol):
    """GET, POST and JSON-patch one Lease. ``get`` answers None when there is none; ``create``
    and ``patch`` raise :class:`KubeConflict` when the API refused the write because the Lease
    changed, was created or was deleted meanwhile, :class:`KubeError` for anything else."""

    async def get(self) -> dict[str, Any] | None: ...

    async def create(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def patch(self, ops: list[dict[str, Any]]) -> dict[str, Any]: ...


class LeaseWriter:
    """Reads and writes the Lease ``namespace/name`` (see the module docstring); a Lease it
    creates carries ``labels``."""

    def __init__(
        self, store: LeaseStore, namespace: str, name: str, labels: Mapping[str, str]
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.name = name
        self.labels = dict(labels)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def read(self) -> dict[str, Any] | None:
        """The Lease as it is now, None if there is none."""
        return await self.store.get()

    async def write(self, lease: Mapping[str, Any] | None, record: LeaseRecord) -> dict[str, Any]:
        """Make ``record`` the Lease's spec: create the Lease if ``lease`` (as last read) is None,
        else swap it if it is still at ``lease``'s version. Answers the Lease as written."""
        if lease is None:
            return await self.store.create(
                new_lease(self.namespace, self.name, record, self.labels)
            )
        return await self.store.patch(cas_patch(resource_version(lease) or "", record))

    async def release(self, holder: str, now: float) -> bool:
        """Mark the Lease released (client-go's ReleaseOnCancel) if it still names ``holder``;
        ``now``: epoch seconds. True if this call released it."""
        lease = await self.read()
        if lease is None:
            return False
        current = LeaseRecord.of(lease)
        if current.holder != holder:
            return False
        await self.write(lease, current.released(now))
        return True


class ApiLeaseStore:
    """:class:`LeaseStore` over :class:`~redlease.kube.client.KubeClient`."""

    def __init__(self, client: KubeClient, namespace: str, name: str, timeout: float) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.timeout = timeout

    async def get(self) -> dict[str, Any] | None:
        try:
            lease = await self.client.request(
                "GET", lease_path(self.namespace, self.name), timeout=self.timeout
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return lease if isinstance(lease, dict) else None

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._write("POST", lease_path(self.namespace), body, "application/json")

    async def patch(self, ops: list[dict[str, Any]]) -> dict[str, Any]:
        return await self._write("PATCH", lease_path(self.namespace, self.name), ops, JSON_PATCH)

    async def _write(self, method: str, path: str, body: Any, content_type: str) -> dict[str, Any]:
        try:
            lease = await self.client.request(
                method, path, body=body, content_type=content_type, timeout=self.timeout
            )
        except KubeError as exc:
            if exc.status in CONFLICT_STATUSES or (method == "PATCH" and exc.status == 404):
                raise KubeConflict(str(exc), exc.status) from None
            raise
        return lease if isinstance(lease, dict) else {}
