"""The kopf internals redlease hooks into are where it expects them (pyproject pins kopf's minor
version for this; a kopf upgrade that moves them fails here, not in a cluster)."""

from __future__ import annotations

import importlib

import pytest

INTERNALS = [
    ("kopf._cogs.clients.watching", "watch_objs"),  # operator/watchgone.py: HTTP 410 -> relist
    ("kopf._cogs.clients.errors", "APIClientError"),
    ("kopf._cogs.clients.api", "post"),  # operator/events.py: Events named when decided
    ("kopf._cogs.structs.bodies", "build_object_reference"),
    ("kopf._cogs.structs.references", "Resource"),
    ("kopf._core.engines.posting", "settings_var"),
    # operator/ports.py: the webhook server's own serving loop reuses kopf's helpers
    ("kopf._kits.webhooks.WebhookServer", "_build_ssl"),
    ("kopf._kits.webhooks.WebhookServer", "_serve"),
    ("kopf._kits.webhooks.WebhookServer", "_build_url"),
    ("kopf._kits.webhooks.WebhookServer", "_get_accessible_addr"),
]


@pytest.mark.parametrize(("module", "name"), INTERNALS)
def test_kopf_internal_exists(module: str, name: str) -> None:
    owner, _, cls = module.partition(".WebhookServer")
    found = importlib.import_module(owner)
    if cls == "" and owner != module:
        found = found.WebhookServer
    assert hasattr(found, name), f"{module}.{name} moved"
