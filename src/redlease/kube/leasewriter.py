"""The one compare-and-swap writer of a ``coordination.k8s.io/v1`` Lease.

Both Lease writers go through :class:`LeaseWriter`: the Lease as an elector's lock
(:mod:`redlease.kube.leaselock`, the operator's own election) and the sidecar's Lease mirror
(:mod:`redlease.sidecar.mirror`), both over :class:`~redlease.kube.client.KubeClient`. It creates
the Lease when there is none and otherwise replaces its spec with a JSON patch that first tests
``metadata.resourceVersion`` (:func:`~redlease.kube.lease.cas_patch`), so a write lands only on
the version the writer read; :class:`~redlease.errors.KubeConflict` says that someone else
wrote first (read again, decide again). Releasing (:meth:`LeaseWriter.release`) is the same
swap, of the record :meth:`~redlease.kube.lease.LeaseRecord.released` builds, and only while the
Lease still names the releaser.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from redlease.errors import KubeConflict, KubeError
from redlease.kube.client import KubeClient
from redlease.kube.lease import (
    CONFLICT_STATUSES,
    LeaseRecord,
    cas_patch,
    new_lease,
    resource_version,
)
from redlease.kube.verbs import create, get, patch


class LeaseWriter:
    """Reads and writes the Lease ``namespace/name``, every call bounded by ``timeout`` seconds
    (see the module docstring); a Lease it creates carries ``labels``."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        timeout: float = 5.0,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.labels = dict(labels)
        self.timeout = timeout

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    async def read(self) -> dict[str, Any] | None:
        """The Lease as it is now, None if there is none."""
        try:
            lease = await get.lease(self.client, self.namespace, self.name, timeout=self.timeout)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return lease if isinstance(lease, dict) else None

    async def write(self, lease: Mapping[str, Any] | None, record: LeaseRecord) -> dict[str, Any]:
        """Make ``record`` the Lease's spec: create the Lease if ``lease`` (as last read) is None,
        else swap it if it is still at ``lease``'s version. Answers the Lease as written;
        :class:`KubeConflict` if the Lease was created, changed or deleted meanwhile."""
        if lease is None:
            body = new_lease(self.namespace, self.name, record, self.labels)
            return await _swapped(
                create.lease(self.client, self.namespace, body, timeout=self.timeout)
            )
        ops = cas_patch(resource_version(lease) or "", record)
        sent = patch.lease(self.client, self.namespace, self.name, ops, timeout=self.timeout)
        return await _swapped(sent, gone_is_conflict=True)

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


async def _swapped(call: Awaitable[Any], *, gone_is_conflict: bool = False) -> dict[str, Any]:
    """The Lease ``call`` (a create or a compare-and-swap) wrote; :class:`KubeConflict` when
    someone else wrote first (a patch of a Lease deleted meanwhile too: ``gone_is_conflict``)."""
    try:
        lease = await call
    except KubeError as exc:
        if exc.status in CONFLICT_STATUSES or (gone_is_conflict and exc.status == 404):
            raise KubeConflict(str(exc), exc.status) from None
        raise
    return lease if isinstance(lease, dict) else {}
