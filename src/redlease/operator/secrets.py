"""The Secrets and Namespaces a lock's resolution reads (:class:`redlease.kube.resolver.Reads`):
the Secret named by ``spec.auth.secretRef``, the Secrets of ``spec.tls`` (CA, client
certificate), and the scope of a namespace's keys (its Namespace's labels,
:func:`redlease.kube.spec.key_scope`).

Reads go through :mod:`redlease.kube.verbs` on the caller's loop, one attempt of at most
``timeout`` seconds (a stalled API server costs one timeout: the next refresh tries again), and
are cached for ``ttl`` seconds; while the API server is away (no answer, 5xx), the last value
read is used past its ``ttl``, so an outage does not turn valid locks invalid. Concurrent reads
of one object share one request (single flight: a cold start with thousands of locks in one
namespace reads its Namespace once). Failures are :class:`ConfigError` naming the spec field
that led to the read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redlease.errors import ConfigError, KubeError
from redlease.kube.client import KubeClient
from redlease.kube.names import SHARED_KEYS_LABEL
from redlease.kube.resolver import Ref
from redlease.kube.spec import key_scope
from redlease.kube.verbs import get
from redlease.operator.apifaults import transient


class Unreachable(ConfigError):
    """The API server did not answer the read (or answered 5xx): a last value may stand in."""


class SecretSource:
    """Fetch and cache Secrets and Namespaces' key scopes (the operator's
    :class:`~redlease.kube.resolver.Reads`); errors name the spec field that led to the read."""

    def __init__(self, kube: KubeClient, ttl: float = 60.0, timeout: float = 5.0) -> None:
        self.kube = kube
        self._ttl = ttl
        self.timeout = timeout  # seconds for one Secret GET, connecting included
        self._cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._scopes: dict[str, tuple[float, str | None]] = {}
        self._flights: dict[tuple[object, ...], asyncio.Future[Any]] = {}

    async def _once(self, what: tuple[str, ...], fetch: Callable[[], Awaitable[Any]]) -> Any:
        """``fetch()``, shared by every caller on this loop that asks for ``what`` while it
        runs (each gets its result or its error; a cancelled caller cancels only its wait)."""
        key = (asyncio.get_running_loop(), *what)
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(fetch())
            self._flights[key] = flight
            flight.add_done_callback(lambda f: self._land(key, f))
        return await asyncio.shield(flight)

    def _land(self, key: tuple[object, ...], flight: asyncio.Future[Any]) -> None:
        if self._flights.get(key) is flight:
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved: a failure nobody awaited any more is not logged

    async def _get(self, read: Awaitable[Any], field: str, failed: str, missing: Any = ...) -> Any:
        """The answer of ``read`` (one GET); a failure is a :class:`ConfigError` on ``field``
        that starts with ``failed`` (a 404 is ``missing`` when given)."""
        try:
            return await read
        except KubeError as exc:
            if exc.status == 404 and missing is not ...:
                return missing
            error = Unreachable if transient(exc) else ConfigError
            raise error(field, f"{failed}: {exc.reason}") from None

    async def secret(self, namespace: str, ref: Ref) -> dict[str, Any]:
        """The Secret (its labels, annotations and data), cached for ``ttl`` seconds."""
        key = (namespace, ref.name)
        hit = self._cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        try:
            secret: dict[str, Any] = await self._once(
                ("secret", namespace, ref.name), lambda: self._fetch(ref, key)
            )
        except Unreachable:
            if hit is None:
                raise
            return hit[1]
        return secret

    async def _fetch(self, ref: Ref, key: tuple[str, str]) -> dict[str, Any]:
        namespace = key[0]
        obj = await self._get(
            get.secret(self.kube, namespace, ref.name, timeout=self.timeout),
            f"{ref.field}.name",
            f"cannot read Secret {namespace}/{ref.name}",
        )
        meta = _mapping(obj, "metadata")
        secret = {
            "metadata": {
                "labels": dict(_mapping(meta, "labels")),
                "annotations": dict(_mapping(meta, "annotations")),
            },
            "data": {str(k): str(v) for k, v in _mapping(obj, "data").items()},
        }
        self._cache[key] = (time.monotonic() + self._ttl, secret)
        return secret

    async def scope(self, namespace: str) -> str | None:
        """The scope of the namespace's keys in Redis (its Namespace's labels are cached for
        ``ttl`` seconds, as Secrets are; no Namespace, no label: the safe default, scoped keys)."""
        hit = self._scopes.get(namespace)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        try:
            scope: str | None = await self._once(
                ("namespace", namespace), lambda: self._scope(namespace)
            )
        except Unreachable:
            if hit is None:
                raise
            return hit[1]
        return scope

    async def _scope(self, namespace: str) -> str | None:
        ns = await self._get(
            get.namespace(self.kube, namespace, timeout=self.timeout),
            "metadata.namespace",
            f"cannot read Namespace {namespace} (for its {SHARED_KEYS_LABEL} label)",
            missing=None,
        )
        labels = _mapping(_mapping(ns, "metadata"), "labels")
        scope = key_scope(namespace, dict(labels))
        self._scopes[namespace] = (time.monotonic() + self._ttl, scope)
        return scope


def _mapping(obj: Any, key: str) -> dict[str, Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}
