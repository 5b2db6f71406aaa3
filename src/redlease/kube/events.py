"""A ``v1`` Kubernetes Event, named when it is decided.

Pure (no I/O). Two posters use it: the operator (:mod:`redlease.operator.events`, through kopf's
client) and the sidecar's leader Events (:mod:`redlease.sidecar.mirror`, through
:class:`~redlease.kube.client.KubeClient`). The name is fixed here, not left to
``generateName``: a POST retried after its answer was lost gets 409 AlreadyExists instead of
storing the Event twice.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from redlease.core.times import format_time

MAX_MESSAGE = 1024  # what kopf keeps of a message too
MAX_NAME = 253  # an object name
_SUFFIX = 17  # "." and 16 hex digits


def event_body(
    involved: Mapping[str, Any],
    *,
    type: str,
    reason: str,
    message: str,
    component: str,
    instance: str,
    host: str = "",
    now: datetime | None = None,
) -> dict[str, Any]:
    """The Event about ``involved`` (an object reference with ``namespace`` and ``name``)."""
    when = now or datetime.now(UTC)
    stamp = format_time(when.timestamp())
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    prefix = str(involved.get("name") or "event")[: MAX_NAME - _SUFFIX]
    source = {"component": component, "host": host} if host else {"component": component}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{prefix}.{secrets.token_hex(8)}",
            "namespace": involved.get("namespace"),
        },
        "type": type,
        "reason": reason,
        "message": message,
        "action": reason,
        "reportingComponent": component,
        "reportingInstance": instance,
        "source": source,
        "involvedObject": dict(involved),
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "eventTime": format_time(when.timestamp(), "microseconds"),
        "count": 1,
    }
