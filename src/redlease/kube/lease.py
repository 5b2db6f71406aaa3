"""The ``coordination.k8s.io/v1`` Lease object: its record, and compare-and-swap.

Pure (no I/O). The one writer (:mod:`redlease.kube.leasewriter`) serves two users: the
operator elects its active replica through a Lease (:mod:`redlease.operator.leadership`), and
the sidecar mirrors a lock's Redis leadership into one (:mod:`redlease.sidecar.mirror`) so that
``kubectl get lease`` and client-go tooling see the leader. It writes with a JSON patch whose
first operation tests ``metadata.resourceVersion``: the API server applies it only to the
version the writer read (optimistic concurrency, as client-go's Update does), and refuses it
otherwise (409 or 422), so two writers can never both believe their write won.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from redlease.core.times import format_time, parse_time

API_VERSION = "coordination.k8s.io/v1"
KIND = "Lease"
CONFLICT_STATUSES = (409, 422)  # resourceVersion changed (409), or the patch's test failed (422)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The ``spec`` of a Lease, as client-go's leader election reads and writes it."""

    holder: str | None = None
    duration: int = 15  # leaseDurationSeconds
    acquire_time: float | None = None  # epoch seconds
    renew_time: float | None = None
    transitions: int = 0

    def spec(self) -> dict[str, Any]:
        """The Lease ``spec`` (a released lease has no holder)."""
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": _micro_time(self.acquire_time),
            "renewTime": _micro_time(self.renew_time),
            "leaseTransitions": self.transitions,
        }

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        """The record of a Lease object (missing fields: their zero values)."""
        spec = lease.get("spec") or {}
        transitions = spec.get("leaseTransitions")
        duration = spec.get("leaseDurationSeconds")
        return cls(
            holder=str(spec["holderIdentity"]) if spec.get("holderIdentity") else None,
            duration=int(duration) if isinstance(duration, int) and duration > 0 else 1,
            acquire_time=parse_time(spec.get("acquireTime")),
            renew_time=parse_time(spec.get("renewTime")),
            transitions=int(transitions) if isinstance(transitions, int) else 0,
        )

    def released(self, now: float) -> LeaseRecord:
        """The record that gives the Lease up (client-go's ReleaseOnCancel): no holder, the
        shortest duration, renewed at ``now`` (epoch seconds); acquire time and transitions
        kept."""
        return replace(self, holder=None, duration=1, renew_time=now)


def _micro_time(seconds: float | None) -> str | None:
    """A Kubernetes MicroTime (RFC 3339, microseconds), or None for an absent time."""
    return None if seconds is None else format_time(seconds, "microseconds")


def duration_seconds(ttl: float) -> int:
    """``leaseDurationSeconds`` for a TTL in seconds: whole seconds, at least 1, never less
    than the TTL (a reader must not think the lease ran out while it still runs)."""
    return max(1, math.ceil(ttl))


def new_lease(namespace: str, name: str, record: LeaseRecord, labels: Mapping[str, str]) -> Any:
    """The body that creates the Lease (:func:`redlease.kube.verbs.create.lease`)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": record.spec(),
    }


def cas_patch(resource_version: str, record: LeaseRecord) -> list[dict[str, Any]]:
    """A JSON patch replacing the Lease's spec by ``record``, applied only if the Lease is still
    at ``resource_version`` (Content-Type ``application/json-patch+json``)."""
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "add", "path": "/spec", "value": record.spec()},  # add = set or replace
    ]


def resource_version(lease: Mapping[str, Any]) -> str | None:
    meta = lease.get("metadata") or {}
    value = meta.get("resourceVersion")
    return str(value) if value is not None else None
