"""The DistributedLock spec model: parsing, defaults, validation (the API names are
:mod:`redlease.kube.names`, the declared fields :mod:`redlease.kube.fields`, the Secrets
:mod:`redlease.kube.secretspec`).

Pure (no I/O). The operator, the sidecar's ``--lock-ref`` and ``redlease run --lock-ref`` all
read a DistributedLock through :func:`parse_spec`; the command-line flags go through the same
:func:`~redlease.core.timing.validate_timing` and
:func:`~redlease.core.connect.validate_target`. The CRD's schema and CEL rules
(crds/distributedlock.yaml) say the same things for the API server; a table-driven test feeds
the same examples to both and expects the same verdict. Every error is a
:class:`~redlease.errors.ConfigError` whose ``field`` is the JSON path (``spec.nodes[1].url``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease.core.connect import Target, Tls, validate_target, with_pem
from redlease.core.keys import scoped_name, validate_identity, validate_name
from redlease.core.rules import MAX_HOLDERS
from redlease.core.timing import DEFAULT_TTL, TTL_RANGE, Timing, validate_timing
from redlease.errors import ConfigError
from redlease.kube.names import SHARED_KEYS_LABEL
from redlease.kube.secretspec import (
    CaSecretRef,
    CertSecretRef,
    SecretRef,
    TlsMaterial,
    TlsRefs,
)

MAX_KEYS = 16
MAX_NODES = 15
MAX_REPLICAS = 15  # spec.replicas: WAIT for this many replicas of a (Sentinel-managed) master
MAX_SECONDS = int(TTL_RANGE[1])  # spec timing fields: whole seconds in the one TTL range
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a DNS-1123 subdomain
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def key_scope(namespace: str, namespace_labels: Mapping[str, Any] | None) -> str | None:
    """The scope of the Redis names of a namespace's DistributedLock keys (see
    :func:`redlease.core.keys.scoped_name`): the namespace, or None (names as written) if its
    Namespace carries ``redlease.dev/shared-keys: "true"``."""
    if (namespace_labels or {}).get(SHARED_KEYS_LABEL) == "true":
        return None
    return namespace


def validate_object_name(value: object, field: str) -> str:
    """A Kubernetes object or namespace name (DNS-1123 subdomain), else :class:`ConfigError`."""
    if not isinstance(value, str) or not _K8S_NAME.fullmatch(value):
        raise ConfigError(field, f"not a valid Kubernetes name: {value!r}")
    return value


def with_tls_material(spec: LockSpec, material: TlsMaterial) -> LockSpec:
    """``spec`` whose nodes are reached with the CA and client certificate of ``material``."""
    tls = with_pem(spec.target.tls, material.ca, material.cert, material.key)
    target = spec.target.with_tls(tls).restricted(material.consent)
    return dataclasses.replace(spec, target=target)


# --- the spec --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockSpec:
    """A validated DistributedLock spec. ``target`` carries no credentials: they come from
    ``secret_ref`` (see :meth:`Target.with_credentials`)."""

    keys: tuple[str, ...]
    target: Target
    timing: Timing = field(default_factory=Timing)
    secret_ref: SecretRef | None = None
    paused: bool = False
    preferred_holder: str | None = None
    tls_refs: TlsRefs = TlsRefs()  # noqa: RUF009 - a frozen dataclass: one shared default
    replicas: int = 0  # WAIT for this many replicas after every write; fail closed if fewer
    holders: int = 1  # how many may hold the lock at once (a counting semaphore's limit)
    scope: str | None = None  # see key_scope; set by who reads the object (it is not in .spec)

    @property
    def name(self) -> str:
        """The primary key: the lock name shown by the sidecar and used for its state file."""
        return self.keys[0]

    @property
    def redis_keys(self) -> tuple[str, ...]:
        """The names of ``keys`` in Redis (:func:`redlease.core.keys.scoped_name`); every
        surface still shows ``keys``."""
        return tuple(scoped_name(self.scope, key) for key in self.keys)

    @property
    def quorum(self) -> int:
        return self.target.quorum

    @property
    def total_nodes(self) -> int:
        return self.target.total

    @property
    def node_names(self) -> tuple[str, ...]:
        return self.target.names


def _object(value: Any, where: str, *, required: bool = False) -> Mapping[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(where, "must be an object" + (" (it is required)" if required else ""))
    return value


def _integer(spec: Mapping[str, Any], key: str, lo: int, hi: int) -> int | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"spec.{key}", f"must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"spec.{key}", f"must be between {lo} and {hi}, got {value}")
    return value


def _boolean(obj: Mapping[str, Any], key: str, where: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(where, f"must be true or false, got {value!r}")
    return value


def _keys(spec: Mapping[str, Any]) -> tuple[str, ...]:
    keys = spec.get("keys")
    if not isinstance(keys, list) or not keys:
        raise ConfigError("spec.keys", "must be a list of at least one lock name")
    if len(keys) > MAX_KEYS:
        raise ConfigError("spec.keys", f"at most {MAX_KEYS} keys, got {len(keys)}")
    for i, key in enumerate(keys):
        validate_name(key, f"spec.keys[{i}]", scoped=False)
    if len(set(keys)) != len(keys):
        raise ConfigError("spec.keys", "keys must be unique")
    return tuple(keys)


def _holders(spec: Mapping[str, Any], keys: Sequence[str]) -> int:
    """``spec.holders``: 1 to MAX_HOLDERS, and more than 1 only over one key (a counting
    semaphore is one lock name: the core's ``Semaphore`` refuses several)."""
    holders = _integer(spec, "holders", 1, MAX_HOLDERS) or 1
    if holders > 1 and len(keys) > 1:
        raise ConfigError(
            "spec.holders",
            f"more than 1 holder needs exactly one key (a semaphore is one lock name), "
            f"got {len(keys)} keys",
        )
    return holders


def _urls(spec: Mapping[str, Any]) -> list[str]:
    nodes = spec.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ConfigError("spec.nodes", "must be a list of at least one {url: ...}")
    if len(nodes) > MAX_NODES:
        raise ConfigError("spec.nodes", f"at most {MAX_NODES} nodes, got {len(nodes)}")
    urls = []
    for i, node in enumerate(nodes):
        url = node.get("url") if isinstance(node, Mapping) else None
        if not isinstance(url, str) or not url:
            raise ConfigError(f"spec.nodes[{i}].url", "is required")
        urls.append(url)
    return urls


def _ref_fields(ref: Mapping[str, Any], where: str, keys: Mapping[str, str]) -> list[str]:
    """The Secret name and its entry names (``keys``: field -> default) of a reference."""
    values = [validate_object_name(ref.get("name"), f"{where}.name")]
    for key, default in keys.items():
        value = ref.get(key, default)
        if not isinstance(value, str) or not _SECRET_KEY.fullmatch(value):
            raise ConfigError(f"{where}.{key}", f"not a Secret key: {value!r}")
        values.append(value)
    return values


def _secret_ref(spec: Mapping[str, Any]) -> SecretRef | None:
    if spec.get("auth") is None:
        return None
    auth = _object(spec.get("auth"), "spec.auth")
    ref = _object(auth.get("secretRef"), SecretRef.field, required=True)
    keys = {"usernameKey": "username", "passwordKey": "password"}
    return SecretRef(*_ref_fields(ref, SecretRef.field, keys))


def _tls(spec: Mapping[str, Any], urls: Sequence[str]) -> tuple[Tls, TlsRefs]:
    tls = _object(spec.get("tls"), "spec.tls")
    skip = _boolean(tls, "insecureSkipVerify", "spec.tls.insecureSkipVerify")
    ca = client = None
    if tls.get("caSecretRef") is not None:
        ref = _object(tls["caSecretRef"], CaSecretRef.field)
        ca = CaSecretRef(*_ref_fields(ref, CaSecretRef.field, {"key": "ca.crt"}))
    if tls.get("clientCertSecretRef") is not None:
        ref = _object(tls["clientCertSecretRef"], CertSecretRef.field)
        keys = {"certKey": "tls.crt", "keyKey": "tls.key"}
        client = CertSecretRef(*_ref_fields(ref, CertSecretRef.field, keys))
    if skip and ca is not None:
        raise ConfigError(
            "spec.tls.insecureSkipVerify",
            "cannot be combined with caSecretRef (a CA is for checking the certificates)",
        )
    refs = TlsRefs(ca, client)
    if refs and not any(url.startswith("rediss") for url in urls):
        raise ConfigError("spec.tls", "applies to rediss:// nodes, and no node uses rediss://")
    return Tls(insecure_skip_verify=skip), refs


def parse_spec(spec: object) -> LockSpec:
    """Validate a DistributedLock's ``.spec`` into a :class:`LockSpec`.

    Raises :class:`ConfigError` naming the first bad field. Defaults: ``ttlSeconds`` 15,
    ``renewDeadlineSeconds`` two thirds and ``retryPeriodSeconds`` two fifteenths of the TTL
    (client-go's ratios), quorum a majority of the nodes, ``replicas`` 0 (no WAIT).
    """
    if not isinstance(spec, Mapping):
        raise ConfigError("spec", "is required and must be an object")
    keys = _keys(spec)
    urls = _urls(spec)
    ttl = _integer(spec, "ttlSeconds", 1, MAX_SECONDS)
    renew = _integer(spec, "renewDeadlineSeconds", 1, MAX_SECONDS)
    retry = _integer(spec, "retryPeriodSeconds", 1, MAX_SECONDS)
    holders = _holders(spec, keys)
    timing = validate_timing(
        DEFAULT_TTL if ttl is None else ttl,
        renew,
        retry,
        names=("spec.ttlSeconds", "spec.renewDeadlineSeconds", "spec.retryPeriodSeconds"),
        bounds=(1, MAX_SECONDS),
    )
    cluster = _boolean(spec, "cluster", "spec.cluster")
    quorum = _integer(spec, "quorum", 1, MAX_NODES)
    tls, tls_refs = _tls(spec, urls)
    target = validate_target(
        urls,
        cluster=cluster,
        quorum=quorum,
        tls=tls,
        credentials_in_urls=False,
        field="spec.nodes",
        url_field="spec.nodes[{i}].url",
        quorum_field="spec.quorum",
        strict_restart=_boolean(spec, "strictRestart", "spec.strictRestart"),
        strict_field="spec.strictRestart",
    )
    replicas = _integer(spec, "replicas", 0, MAX_REPLICAS) or 0
    preferred = spec.get("preferredHolder")
    if preferred is not None:
        validate_identity(preferred, "spec.preferredHolder")
    return LockSpec(
        keys=keys,
        target=target,
        timing=timing,
        secret_ref=_secret_ref(spec),
        paused=_boolean(spec, "paused", "spec.paused"),
        preferred_holder=preferred or None,
        tls_refs=tls_refs,
        replicas=replicas,
        holders=holders,
    )
