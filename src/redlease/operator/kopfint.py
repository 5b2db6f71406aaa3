"""Every piece of kopf's private API the operator uses, in one place.

pyproject pins kopf's minor version for these; tests/operator/test_kopf_internals.py checks
that each name still exists, so a kopf upgrade that moves one fails there, not in a cluster.
:mod:`.events` posts Events with kopf's API call and login; :mod:`.watchgone` wraps kopf's
watch request.
"""

from __future__ import annotations

from typing import Any

from kopf._cogs.clients import api, errors, watching
from kopf._cogs.structs import bodies, references
from kopf._core.engines.posting import settings_var

APIClientError = errors.APIClientError
APIConflictError = errors.APIConflictError
APIError = errors.APIError
EVENTS = references.Resource(group="", version="v1", plural="events", namespaced=True)

INTERNALS = [  # (module, name): what this module takes from kopf
    ("kopf._cogs.clients.watching", "watch_objs"),
    ("kopf._cogs.clients.errors", "APIClientError"),
    ("kopf._cogs.clients.errors", "APIConflictError"),
    ("kopf._cogs.clients.errors", "APIError"),
    ("kopf._cogs.clients.api", "post"),
    ("kopf._cogs.structs.bodies", "build_object_reference"),
    ("kopf._cogs.structs.references", "Resource"),
    ("kopf._core.engines.posting", "settings_var"),
]


def object_reference(body: Any) -> dict[str, Any]:
    """The Event's ``involvedObject`` for a kopf body."""
    return dict(bodies.build_object_reference(body))


def posting_settings() -> Any:
    """The running kopf's settings (its ``posting`` names the reporting component)."""
    return settings_var.get()


async def post(url: str, payload: dict[str, Any], logger: Any, backoffs: Any) -> None:
    """POST ``payload`` with kopf's login and its retries over ``backoffs``."""
    await api.post(
        url=url,
        headers={"Content-Type": "application/json"},
        payload=payload,
        settings=settings_var.get(),
        logger=logger,
        backoffs=backoffs,
    )


def events_url(namespace: str) -> str:
    return str(EVENTS.get_url(namespace=references.NamespaceName(namespace)))


def watch_module() -> Any:
    """The module whose ``watch_objs`` kopf's watchers call (:mod:`.watchgone` wraps it)."""
    return watching
