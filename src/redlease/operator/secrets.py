"""Redis credentials from the Secret named by ``spec.auth.secretRef``, the Secrets of
``spec.tls`` (CA, client certificate), and the scope of a namespace's keys (its Namespace's
labels, :func:`redlease.kube.spec.key_scope`).

Reads go through the ``kubernetes`` client in a worker thread (never on kopf's loop) and are
cached for ``ttl`` seconds. In a pod, kopf's login has already loaded the in-cluster config
into the client's default configuration, which this module reuses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
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

    def __init__(self, configuration: Any = None, ttl: float = 60.0) -> None:
        self._configuration = configuration
        self._ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._scopes: dict[str, tuple[float, str | None]] = {}

    def _fetch(self, namespace: str, ref: Ref) -> dict[str, Any]:
        import kubernetes.client
        from kubernetes.client.exceptions import ApiException

        with kubernetes.client.ApiClient(self._configuration) as api:
            try:
                secret = kubernetes.client.CoreV1Api(api).read_namespaced_secret(
                    ref.name, namespace
                )
            except ApiException as exc:
                raise ConfigError(
                    f"{ref.field}.name",
                    f"cannot read Secret {namespace}/{ref.name}: HTTP {exc.status} {exc.reason}",
                ) from None
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

    async def get(self, namespace: str, ref: SecretRef, nodes: Sequence[str] = ()) -> Credentials:
        """The credentials for ``nodes`` (the Secret must consent: see
        :func:`redlease.kube.spec.credentials_from_secret`)."""
        return credentials_from_secret(await self.secret(namespace, ref), ref, nodes)

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
        return with_tls_material(spec, tls_material(refs, secrets, spec.node_names))

    def _namespace_labels(self, namespace: str) -> dict[str, Any]:
        import kubernetes.client
        from kubernetes.client.exceptions import ApiException

        with kubernetes.client.ApiClient(self._configuration) as api:
            try:
                ns = kubernetes.client.CoreV1Api(api).read_namespace(namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return {}  # no Namespace, no label: the safe default, scoped keys
                raise ConfigError(
                    "metadata.namespace",
                    f"cannot read Namespace {namespace} (for its {SHARED_KEYS_LABEL} label): "
                    f"HTTP {exc.status} {exc.reason}",
                ) from None
        return dict(getattr(ns.metadata, "labels", None) or {})

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
