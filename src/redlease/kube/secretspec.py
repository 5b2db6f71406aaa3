"""A DistributedLock's Secrets, decoded (pure): the references of ``spec.auth`` and
``spec.tls``, the credentials and TLS material read from the Secrets they name, and the nodes a
credentials Secret consents to (``redlease.dev/allowed-nodes``). Every error is a
:class:`~redlease.errors.ConfigError` naming the spec field that refers to the Secret."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease.core.urls import Consent
from redlease.core.urls import check_consent as check_urls
from redlease.errors import ConfigError
from redlease.kube.names import ALLOWED_NODES_ANNOTATION, CREDENTIALS_LABEL


@dataclass(frozen=True, slots=True)
class SecretRef:
    """``spec.auth.secretRef``: a Secret in the lock's namespace and the keys of its entries."""

    name: str
    username_key: str = "username"
    password_key: str = "password"  # noqa: S105 - the name of a key, not a password
    field = "spec.auth.secretRef"


@dataclass(frozen=True, slots=True)
class CaSecretRef:
    """``spec.tls.caSecretRef``: the CA bundle (PEM) that verifies the nodes' certificates."""

    name: str
    key: str = "ca.crt"
    field = "spec.tls.caSecretRef"


@dataclass(frozen=True, slots=True)
class CertSecretRef:
    """``spec.tls.clientCertSecretRef``: the client certificate and key (PEM) for mTLS; the
    defaults are the entries of a ``kubernetes.io/tls`` Secret (as cert-manager writes it)."""

    name: str
    cert_key: str = "tls.crt"
    key_key: str = "tls.key"
    field = "spec.tls.clientCertSecretRef"


@dataclass(frozen=True, slots=True)
class TlsRefs:
    """The Secrets ``spec.tls`` names (none, either or both; they may be the same Secret)."""

    ca: CaSecretRef | None = None
    client: CertSecretRef | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.name for r in (self.ca, self.client) if r is not None))

    def __bool__(self) -> bool:
        return self.ca is not None or self.client is not None


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """PEM text read from the Secrets of :class:`TlsRefs` (never in ``repr``)."""

    ca: str | None = field(default=None, repr=False)
    cert: str | None = field(default=None, repr=False)
    key: str | None = field(default=None, repr=False)
    consent: Consent | None = None  # the nodes the Secrets allow (None: no allowed list)


@dataclass(frozen=True, slots=True)
class Credentials:
    """Username and password read from a Secret (never in ``repr``)."""

    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    consent: Consent | None = None  # the nodes the Secret allows (None: no allowed list)


def credentials_from_secret(
    secret: Mapping[str, Any], ref: SecretRef, urls: Sequence[str] = ()
) -> Credentials:
    """Decode the entries ``ref`` names from a Secret object (``data`` is base64,
    ``stringData`` plain). The password entry is required, the username entry optional.

    Secrets only by consent: whoever may write a DistributedLock chooses its Secret and its
    nodes, so redlease uses a Secret only if it carries ``redlease.dev/credentials: "true"``,
    and, if it lists ``redlease.dev/allowed-nodes``, only for those nodes: every one of the
    lock's ``urls`` must be allowed (:func:`check_consent`), and the consent travels with the
    credentials so that a master a Sentinel names is checked too. See docs/security.md.
    """
    consent = check_consent(secret, ref, urls)
    password = _secret_entry(secret, ref, ref.password_key, "passwordKey")
    if password is None:
        raise ConfigError(
            "spec.auth.secretRef.passwordKey",
            f"Secret {ref.name!r} has no entry {ref.password_key!r}",
        )
    username = _secret_entry(secret, ref, ref.username_key, "usernameKey")
    return Credentials(username or None, password, consent)


def check_consent(
    secret: Mapping[str, Any],
    ref: SecretRef | CaSecretRef | CertSecretRef,
    urls: Sequence[str] = (),
) -> Consent | None:
    """The Secret's consent (``None``: no allowed list), after checking it opted in and
    allows every one of ``urls`` (scheme, host and port: :func:`redlease.core.urls.
    consent_names`). A :class:`ConfigError` names the spec field that refers to the Secret,
    or ``spec.nodes`` and the refused URLs -- never the nodes the Secret allows."""
    meta = secret.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(CREDENTIALS_LABEL) != "true":
        raise ConfigError(
            f"{ref.field}.name",
            f"Secret {ref.name!r} has not opted in: label it {CREDENTIALS_LABEL}=true to let "
            "redlease send its credentials to the lock's nodes (docs/security.md)",
        )
    allowed = (meta.get("annotations") or {}).get(ALLOWED_NODES_ANNOTATION)
    if allowed is None:
        return None
    consent = Consent.parse(str(allowed), f"Secret {ref.name!r}: {ALLOWED_NODES_ANNOTATION}")
    check_urls(consent, urls, "spec.nodes", f"Secret {ref.name!r} ({ALLOWED_NODES_ANNOTATION})")
    return consent


def _secret_entry(
    secret: Mapping[str, Any], ref: SecretRef | CaSecretRef | CertSecretRef, key: str, what: str
) -> str | None:
    data = secret.get("data") or {}
    if key in data:
        try:
            return base64.b64decode(str(data[key]), validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise ConfigError(
                f"{ref.field}.{what}",
                f"entry {key!r} of Secret {ref.name!r} is not valid base64 UTF-8",
            ) from None
    string_data = secret.get("stringData") or {}
    return str(string_data[key]) if key in string_data else None


_PEM_KINDS = {
    "certificate": ("-----BEGIN CERTIFICATE-----",),
    "private key": ("-----BEGIN PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----",
                    "-----BEGIN EC PRIVATE KEY-----"),
}  # fmt: skip


def _pem(
    secret: Mapping[str, Any],
    ref: CaSecretRef | CertSecretRef,
    key: str,
    what: str,
    kind: str,
) -> str:
    """One PEM entry of a Secret; errors name the field and the entry, never the content."""
    text = _secret_entry(secret, ref, key, what)
    if text is None:
        raise ConfigError(f"{ref.field}.{what}", f"Secret {ref.name!r} has no entry {key!r}")
    if not any(marker in text for marker in _PEM_KINDS[kind]):
        raise ConfigError(
            f"{ref.field}.{what}", f"entry {key!r} of Secret {ref.name!r} is not a PEM {kind}"
        )
    return text


def tls_material(
    refs: TlsRefs, secrets: Mapping[str, Mapping[str, Any]], urls: Sequence[str] = ()
) -> TlsMaterial:
    """The PEM text of ``spec.tls``'s Secrets (``secrets``: name -> Secret object). Each Secret
    must consent, as credentials must (:func:`check_consent`): a client key is a credential,
    and redlease reads no Secret that did not opt in."""
    ca = cert = key = None
    consent: Consent | None = None
    if refs.ca is not None:
        secret = secrets[refs.ca.name]
        consent = check_consent(secret, refs.ca, urls)
        ca = _pem(secret, refs.ca, refs.ca.key, "key", "certificate")
    if refs.client is not None:
        secret = secrets[refs.client.name]
        allowed = check_consent(secret, refs.client, urls)
        consent = allowed if consent is None else consent & allowed
        cert = _pem(secret, refs.client, refs.client.cert_key, "certKey", "certificate")
        key = _pem(secret, refs.client, refs.client.key_key, "keyKey", "private key")
    return TlsMaterial(ca, cert, key, consent)


__all__ = [
    "CaSecretRef",
    "CertSecretRef",
    "Credentials",
    "SecretRef",
    "TlsMaterial",
    "TlsRefs",
    "check_consent",
    "credentials_from_secret",
    "tls_material",
]
