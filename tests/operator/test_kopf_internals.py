"""The kopf internals redlease hooks into (operator/kopfint.py) are where it expects them
(pyproject pins kopf's minor version for this; a kopf upgrade that moves them fails here, not in
a cluster)."""

from __future__ import annotations

import importlib

import pytest

from redlease.operator.kopfint import INTERNALS


@pytest.mark.parametrize(("module", "name"), INTERNALS)
def test_kopf_internal_exists(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name), f"{module}.{name} moved"


@pytest.mark.parametrize("name", ["_build_ssl", "_serve", "_build_url", "_get_accessible_addr"])
def test_kopf_webhook_server_helper_exists(name: str) -> None:
    """operator/ports.py serves kopf's webhook through its own loop with these helpers."""
    import kopf

    assert callable(getattr(kopf.WebhookServer, name, None)), f"kopf.WebhookServer.{name} moved"


def test_webhook_server_serves_through_serve() -> None:
    """operator/webhook.py overrides ``WebhookServer._serve`` (kopf's: a static method taking
    the handler and the aiohttp request, called as ``self._serve``) to check every review
    before kopf parses it."""
    import inspect

    import kopf

    serve = inspect.getattr_static(kopf.WebhookServer, "_serve")
    assert isinstance(serve, staticmethod)
    assert list(inspect.signature(serve.__func__).parameters) == ["fn", "request"]
