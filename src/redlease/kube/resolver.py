"""From a DistributedLock to what a client connects with: THE rule the operator and the sidecar
(``--lock-ref``, hence ``redlease run --lock-ref``) share.

A lock is connectable with four things, in this order: its spec
(:func:`~redlease.kube.spec.parse_spec`); the scope of its keys in Redis, from its Namespace's
labels (:func:`~redlease.kube.spec.key_scope`); its credentials, from the Secret
``spec.auth.secretRef`` names, by that Secret's consent
(:func:`~redlease.kube.secretspec.credentials_from_secret`); its TLS material, from the Secrets of
``spec.tls``, by their consent (:func:`~redlease.kube.secretspec.tls_material`). Credentials or TLS
files the caller was given (the sidecar's flags: an injected pod gets them from those Secrets
as env vars and volumes) stand in for the Secrets, which are then not read.

Where the Namespace and the Secrets come from is the caller's (:class:`Reads`): the operator's
cached, single-flight :class:`~redlease.operator.secrets.SecretSource`, or :class:`ApiReads`
(one GET each, as the sidecar reads its one lock). :func:`resolve` is the whole rule;
:func:`scoped_spec` then :func:`connectable` are its two halves, for a caller that checks the
spec's nodes before any Secret is read (the sidecar's pinned nodes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from redlease.core.connect import Tls
from redlease.errors import KubeError
from redlease.kube.client import KubeClient
from redlease.kube.names import SHARED_KEYS_LABEL
from redlease.kube.secretspec import (
    CaSecretRef,
    CertSecretRef,
    Credentials,
    SecretRef,
    credentials_from_secret,
    tls_material,
)
from redlease.kube.spec import LockSpec, key_scope, parse_spec, with_tls_material
from redlease.kube.verbs import get

Ref = SecretRef | CaSecretRef | CertSecretRef


class Reads(Protocol):
    """The Kubernetes reads a lock's resolution needs."""

    async def scope(self, namespace: str) -> str | None:
        """The scope of the namespace's lock keys in Redis (:func:`key_scope` of its labels)."""
        ...

    async def secret(self, namespace: str, ref: Ref) -> Mapping[str, Any]:
        """The Secret ``ref`` names (its labels, annotations and data)."""
        ...


@dataclass(frozen=True, slots=True)
class Connectable:
    """A lock's spec as a client connects with it (keys scoped, TLS material in its target),
    and the credentials for its nodes (None: none)."""

    spec: LockSpec
    credentials: Credentials | None


async def resolve(raw: object, namespace: str, reads: Reads) -> Connectable:
    """The lock whose ``.spec`` is ``raw``, in ``namespace``, made connectable (see the module
    docstring). A :class:`~redlease.errors.ConfigError` names the spec field at fault."""
    spec = await scoped_spec(raw, namespace, reads)
    return await connectable(spec, namespace, reads)


async def scoped_spec(raw: object, namespace: str, reads: Reads) -> LockSpec:
    """The parsed spec, its keys scoped by its Namespace."""
    spec = parse_spec(raw)
    return dataclasses.replace(spec, scope=await reads.scope(namespace))


async def connectable(
    spec: LockSpec,
    namespace: str,
    reads: Reads,
    *,
    credentials: Credentials | None = None,
    tls: Tls | None = None,
) -> Connectable:
    """``spec`` with its credentials and TLS material: the ones given, else its Secrets'."""
    ref = spec.secret_ref
    if credentials is None and ref is not None:
        secret = await reads.secret(namespace, ref)
        credentials = credentials_from_secret(secret, ref, spec.target.urls)
    return Connectable(await _with_tls(spec, namespace, reads, tls), credentials)


async def _with_tls(spec: LockSpec, namespace: str, reads: Reads, given: Tls | None) -> LockSpec:
    """TLS files given win (the spec's ``insecureSkipVerify`` still holds); else the CA and
    client certificate of ``spec.tls``'s Secrets (each read once)."""
    if given is not None:
        skip = given.insecure_skip_verify or spec.target.tls.insecure_skip_verify
        tls = dataclasses.replace(given, insecure_skip_verify=skip)
        return dataclasses.replace(spec, target=spec.target.with_tls(tls))
    refs = spec.tls_refs
    if not refs:
        return spec
    secrets: dict[str, Mapping[str, Any]] = {}
    for ref in (refs.ca, refs.client):
        if ref is not None and ref.name not in secrets:
            secrets[ref.name] = await reads.secret(namespace, ref)
    return with_tls_material(spec, tls_material(refs, secrets, spec.target.urls))


class ApiReads:
    """:class:`Reads` through the API, one GET each and no cache; a failure is the
    :class:`KubeError` (a Namespace that cannot be read fails the read: no election on a
    guess; one that does not exist has no label)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def scope(self, namespace: str) -> str | None:
        try:
            ns = await get.namespace(self.client, namespace)
        except KubeError as exc:
            if exc.status != 404:
                raise KubeError(
                    f"{exc} (the Namespace's {SHARED_KEYS_LABEL} label decides the Redis names "
                    f"of the lock's keys: allow get on namespaces/{namespace})",
                    exc.status,
                ) from None
            ns = {}
        labels = ((ns if isinstance(ns, dict) else {}).get("metadata") or {}).get("labels")
        return key_scope(namespace, labels)

    async def secret(self, namespace: str, ref: Ref) -> Mapping[str, Any]:
        secret = await get.secret(self.client, namespace, ref.name)
        return secret if isinstance(secret, dict) else {}
