"""Redis credentials from the Secret named by ``spec.auth.secretRef``, the Secrets of
``spec.tls`` (CA, client certificate), and the scope of a namespace's keys (its Namespace's
labels, :func:`redlease.kube.spec.key_scope`).

Reads go through the ``kubernetes`` client in a worker thread (never on kopf's loop), one
attempt of at most ``timeout`` seconds (a stalled API server frees the thread: the next refresh
tries again), and are cached for ``ttl`` seconds. In a pod, kopf's login has already loaded the
in-cluster config into the client's default configuration, which this module reuses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

from redlease.errors import ConfigError
from redlease.kube.spec import (
    SHARED_KEYS_LABEL,
    CaSecretRef,
    CertSecretRef,
    Credentials,
    LockSpec,
    SecretRef,
    credentials_from_secret,
    key_scope,
    tls_material,
    with_tls_material,
)

Ref = SecretRef | CaSecretRef | CertSecretRef


class SecretSource:
    """Fetch and cache Secrets; errors name the spec field that refers to the Secret."""

    def __init__(self, configuration: Any = None, ttl: float = 60.0, timeout: float = 5.0) -> None:
        self._configuration = configuration
        self._ttl = ttl
        self.timeout = timeout  # seconds for one Secret GET, connecting included
        self._cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._scopes: dict[str, tuple[float, str | None]] = {}

    def _get(self, field: str, failed: str, read: Callable[[Any], Any]) -> Any:
        """``read(CoreV1Api)`` in one attempt of at most ``timeout`` seconds; a failure is a
        :class:`ConfigError` on ``field`` that starts with ``failed``."""
        import kubernetes.client
        import urllib3
        from kubernetes.client.exceptions import ApiException

        conf = self._configuration or kubernetes.client.Configuration.get_default_copy()
        conf.retries = False  # one attempt: urllib3 would repeat a timed-out GET three times
        with kubernetes.client.ApiClient(conf) as api:
            try:
                return read(kubernetes.client.CoreV1Api(api))
            except ApiException as exc:
                raise ConfigError(field, f"{failed}: HTTP {exc.status} {exc.reason}") from None
            except urllib3.exceptions.TimeoutError:
                raise ConfigError(field, f"{failed}: no answer within {self.timeout:g}s") from None
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise ConfigError(field, f"{failed}: {exc}") from None

    def _fetch(self, namespace: str, ref: Ref) -> dict[str, Any]:
        secret = self._get(
            f"{ref.field}.name",
            f"cannot read Secret {namespace}/{ref.name}",
            lambda api: api.read_namespaced_secret(
                ref.name, namespace, _request_timeout=self.timeout
            ),
        )
        meta = secret.metadata
        return {
            "metadata": {
                "labels": dict(getattr(meta, "labels", None) or {}),
                "annotations": dict(getattr(meta, "annotations", None) or {}),
            },
            "data": {str(k): str(v) for k, v in (secret.data or {}).items()},
        }

    async def secret(self, namespace: str, ref: Ref) -> dict[str, Any]:
        """The Secret (its labels, annotations and data), cached for ``ttl`` seconds."""
        key = (namespace, ref.name)
        hit = self._cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        secret = await asyncio.to_thread(self._fetch, namespace, ref)
        self._cache[key] = (time.monotonic() + self._ttl, secret)
        return secret

    async def get(self, namespace: str, ref: SecretRef, urls: Sequence[str] = ()) -> Credentials:
        """The credentials for the nodes of ``urls`` (the Secret must consent: see
        :func:`redlease.kube.spec.credentials_from_secret`)."""
        return credentials_from_secret(await self.secret(namespace, ref), ref, urls)

    async def with_tls(self, spec: LockSpec, namespace: str) -> LockSpec:
        """``spec`` with the CA and client certificate its ``spec.tls`` Secrets hold (each
        Secret must consent: :func:`redlease.kube.spec.tls_material`)."""
        refs = spec.tls_refs
        if not refs:
            return spec
        secrets = {}
        for ref in (refs.ca, refs.client):
            if ref is not None and ref.name not in secrets:
                secrets[ref.name] = await self.secret(namespace, ref)
        return with_tls_material(spec, tls_material(refs, secrets, spec.target.urls))

    def _namespace_labels(self, namespace: str) -> dict[str, Any]:
        def read(api: Any) -> Any:
            from kubernetes.client.exceptions import ApiException

            try:
                return api.read_namespace(namespace, _request_timeout=self.timeout)
            except ApiException as exc:
                if exc.status == 404:
                    return None  # no Namespace, no label: the safe default, scoped keys
                raise

        ns = self._get(
            "metadata.namespace",
            f"cannot read Namespace {namespace} (for its {SHARED_KEYS_LABEL} label)",
            read,
        )
        return dict(getattr(getattr(ns, "metadata", None), "labels", None) or {})

    async def scoped(self, spec: LockSpec, namespace: str) -> LockSpec:
        """``spec`` with the scope of its keys in Redis (the Namespace's labels are cached for
        ``ttl`` seconds, as Secrets are)."""
        hit = self._scopes.get(namespace)
        if hit is not None and hit[0] > time.monotonic():
            scope = hit[1]
        else:
            labels = await asyncio.to_thread(self._namespace_labels, namespace)
            scope = key_scope(namespace, labels)
            self._scopes[namespace] = (time.monotonic() + self._ttl, scope)
        return dataclasses.replace(spec, scope=scope)
