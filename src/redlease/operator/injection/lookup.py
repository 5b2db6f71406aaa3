"""What the caller found for a pod's DistributedLock, parsed once, and the consent rule that
decides whether the lock's Secrets may be wired into the pod.

The webhook (a GET against the API server) and ``redlease inject`` (the manifests given) build
one :class:`LockLookup` per pod; its ``spec`` is parsed when the lookup is made and every later
step (which Secrets to fetch, the consent check, the pinned nodes) reads that one parse.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from redlease.core.urls import SENTINEL_SCHEMES
from redlease.errors import ConfigError
from redlease.kube.secretspec import check_consent
from redlease.kube.spec import LockSpec, parse_spec

# What a pod's author learns when a lock's Secret does not consent: not which check failed
# (opt-in label or allowed nodes) nor what the Secret allows.
NO_CONSENT = "the lock's Secret does not consent to these nodes"


@dataclass(frozen=True, slots=True)
class LockLookup:
    """The DistributedLock object, nothing (``found`` false), or an error text (the API could not
    be asked); ``spec``/``invalid``: the object's spec, parsed once here, or why it is invalid;
    ``secrets``: the Secrets the lock names that were found, by name (only their consent --
    label and allowed nodes -- is looked at; a Secret not there is not checked);
    ``consent_error``: why the Secrets could not be read."""

    obj: Mapping[str, Any] | None = None
    error: str | None = None
    consent_error: str | None = None
    secrets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    spec: LockSpec | None = None
    invalid: str | None = None

    def __post_init__(self) -> None:
        if self.obj is not None and self.spec is None and self.invalid is None:
            try:
                object.__setattr__(self, "spec", parse_spec(self.obj.get("spec")))
            except ConfigError as exc:
                object.__setattr__(self, "invalid", str(exc))

    @property
    def found(self) -> bool:
        return self.obj is not None

    def secret_names(self) -> list[str]:
        """Every Secret the lock names (auth, then spec.tls), each once; [] if invalid."""
        if self.spec is None:
            return []
        auth = [self.spec.secret_ref.name] if self.spec.secret_ref is not None else []
        return list(dict.fromkeys([*auth, *self.spec.tls_refs.names()]))

    def with_secrets(
        self, secrets: Mapping[str, Mapping[str, Any]], consent_error: str | None = None
    ) -> LockLookup:
        """This lookup with the Secrets found (the spec is not parsed again)."""
        return dataclasses.replace(self, secrets=dict(secrets), consent_error=consent_error)


NOT_FOUND = LockLookup()


def usable_spec(lock: LockLookup, where: str) -> tuple[LockSpec | None, str | None]:
    """(the lock's spec, None) from a valid lock whose Secrets (``spec.auth.secretRef`` and
    ``spec.tls``) consent to the lock's nodes, or (None, the problem).

    Secrets only by consent (docs/security.md): whoever writes a DistributedLock picks its
    Secrets and its nodes, so the injector wires a Secret into a pod only if it carries the
    consent label and, if it lists allowed nodes, the lock's nodes are among them -- the one
    check in :func:`redlease.kube.secretspec.check_consent`, as the operator and the sidecar
    apply it.
    """
    if lock.error is not None:
        return None, f"cannot read {where}: {lock.error}"
    if lock.obj is None:
        return None, f"{where} not found"
    spec = lock.spec
    if spec is None:
        return None, f"{where} is invalid: {lock.invalid}"
    refs = [r for r in (spec.secret_ref, spec.tls_refs.ca, spec.tls_refs.client) if r is not None]
    for ref in refs:
        if lock.consent_error is not None:
            return None, (
                f"cannot check the consent of Secret {ref.name!r} ({lock.consent_error}), so "
                "its credentials are not wired into the pod"
            )
        secret = lock.secrets.get(ref.name)
        if secret is not None:
            try:
                consent = check_consent(secret, ref, spec.target.urls)
            except ConfigError:
                consent = None
                refused = True
            else:  # a Sentinel lock needs a master to be allowed too
                refused = consent is not None and _sentinel(spec) and not consent.masters()
            if refused:
                return None, f"{where}: {NO_CONSENT}; its credentials are not wired into the pod"
    return spec, None


def _sentinel(spec: LockSpec) -> bool:
    return any(
        url.startswith(tuple(f"{s}://" for s in SENTINEL_SCHEMES)) for url in spec.target.urls
    )


def allowed_masters(lock: LockLookup) -> tuple[str, ...]:
    """For a Sentinel lock whose credentials Secret lists allowed nodes: the masters it allows
    (``--allowed-master``: the injected sidecar gets its credentials from its environment and
    never reads the Secret, so it is told which masters a Sentinel may name); none otherwise."""
    spec = lock.spec
    if spec is None or spec.secret_ref is None or not _sentinel(spec):
        return ()
    secret = lock.secrets.get(spec.secret_ref.name)
    if secret is None:
        return ()
    try:
        consent = check_consent(secret, spec.secret_ref, spec.target.urls)
    except ConfigError:
        return ()
    return consent.masters() if consent is not None else ()


def pinned_urls(spec: LockSpec | None) -> tuple[str, ...]:
    """The node URLs a pod is pinned to: those of a lock whose Secrets are wired into it
    (credentials or TLS), whose consent was checked for exactly these nodes; none otherwise
    (the sidecar then reads the Secrets itself and checks their consent on every read)."""
    if spec is None or (spec.secret_ref is None and not spec.tls_refs):
        return ()
    return spec.target.urls
