"""Parse and validate a ``DistributedLock`` spec (pure; the CRD schema says the same rules).

The API server rejects most bad specs through the CRD's schema and CEL rules, but objects can
predate a CRD upgrade or come from a server without CEL, so the operator checks again and every
error names the field (``spec.nodes[1].url``) through :class:`redlease.errors.ConfigError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from redlease.core.connect import redact, validate_url
from redlease.core.keys import validate_name
from redlease.errors import ConfigError

GROUP = "redlease.dev"
VERSION = "v1alpha1"
PLURAL = "distributedlocks"
KIND = "DistributedLock"
FORCE_RELEASE_ANNOTATION = "redlease.dev/force-release"

MAX_KEYS = 16
MAX_NODES = 15
MAX_SECONDS = 3600
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class SecretRef:
    """Where the Redis credentials live: a Secret in the lock's namespace."""

    name: str
    username_key: str = "username"
    password_key: str = "password"  # noqa: S105 - the name of a key, not a password


@dataclass(frozen=True, slots=True)
class LockSpec:
    """A validated spec. ``quorum`` is the effective quorum (1 for a single node or a cluster)."""

    keys: tuple[str, ...]
    nodes: tuple[str, ...]
    ttl_seconds: int = 15
    renew_deadline_seconds: int = 10
    retry_period_seconds: int = 2
    quorum: int = 1
    cluster: bool = False
    secret_ref: SecretRef | None = None
    insecure_skip_verify: bool = False
    paused: bool = False
    preferred_holder: str | None = None

    @property
    def total_nodes(self) -> int:
        """Nodes as the status counts them: a cluster is one logical node."""
        return 1 if self.cluster else len(self.nodes)

    @property
    def node_names(self) -> tuple[str, ...]:
        """Secret-free node names for status and events."""
        if self.cluster:
            return ("cluster " + ",".join(_display(u) for u in self.nodes),)
        return tuple(_display(u) for u in self.nodes)


def _display(url: str) -> str:
    """``host:port`` (or the socket path) of a node URL, never its password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix:{parts.path}"
    return f"{parts.hostname}:{parts.port or 6379}" if parts.hostname else redact(url)


def _int(spec: Mapping[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"spec.{key}", f"must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ConfigError(f"spec.{key}", f"must be between {lo} and {hi}, got {value}")
    return value


def _bool(spec: Mapping[str, Any], key: str, field: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(field, f"must be true or false, got {value!r}")
    return value


def _keys(spec: Mapping[str, Any]) -> tuple[str, ...]:
    keys = spec.get("keys")
    if not isinstance(keys, list) or not keys:
        raise ConfigError("spec.keys", "must be a list of at least one lock name")
    if len(keys) > MAX_KEYS:
        raise ConfigError("spec.keys", f"at most {MAX_KEYS} keys, got {len(keys)}")
    for i, key in enumerate(keys):
        try:
            validate_name(key)
        except ConfigError as exc:
            raise ConfigError(f"spec.keys[{i}]", exc.message) from None
    if len(set(keys)) != len(keys):
        raise ConfigError("spec.keys", "keys must be unique")
    return tuple(keys)


def _nodes(spec: Mapping[str, Any]) -> tuple[str, ...]:
    nodes = spec.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ConfigError("spec.nodes", "must be a list of at least one {url: ...}")
    if len(nodes) > MAX_NODES:
        raise ConfigError("spec.nodes", f"at most {MAX_NODES} nodes, got {len(nodes)}")
    urls: list[str] = []
    for i, node in enumerate(nodes):
        field = f"spec.nodes[{i}].url"
        url = node.get("url") if isinstance(node, Mapping) else None
        if not isinstance(url, str) or not url:
            raise ConfigError(field, "is required")
        validate_url(url, field)
        if "@" in urlsplit(url).netloc:
            raise ConfigError(field, "must not carry credentials; use spec.auth.secretRef")
        urls.append(url)
    if len(set(urls)) != len(urls):
        raise ConfigError("spec.nodes", "node URLs must be unique")
    return tuple(urls)


def _secret_ref(spec: Mapping[str, Any]) -> SecretRef | None:
    auth = spec.get("auth")
    if auth is None:
        return None
    ref = auth.get("secretRef") if isinstance(auth, Mapping) else None
    if not isinstance(ref, Mapping):
        raise ConfigError("spec.auth.secretRef", "is required when spec.auth is set")
    name = ref.get("name")
    if not isinstance(name, str) or not _SECRET_NAME.match(name):
        raise ConfigError("spec.auth.secretRef.name", f"not a Secret name: {name!r}")
    values: dict[str, str] = {}
    for key, default in (("usernameKey", "username"), ("passwordKey", "password")):
        value = ref.get(key, default)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"spec.auth.secretRef.{key}", "must be a non-empty string")
        values[key] = value
    return SecretRef(name, values["usernameKey"], values["passwordKey"])


def parse_spec(spec: Mapping[str, Any] | None) -> LockSpec:
    """Validate ``spec`` (the object's ``.spec``) into a :class:`LockSpec`.

    Raises :class:`ConfigError` whose ``field`` is the JSON path of the first bad field.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError("spec", "is required")
    keys = _keys(spec)
    nodes = _nodes(spec)
    ttl = _int(spec, "ttlSeconds", 15, 1, MAX_SECONDS)
    renew = _int(spec, "renewDeadlineSeconds", min(10, ttl - 1) if ttl > 1 else 1, 1, MAX_SECONDS)
    if renew >= ttl:
        raise ConfigError(
            "spec.renewDeadlineSeconds", f"must be below ttlSeconds ({ttl}), got {renew}"
        )
    retry = _int(spec, "retryPeriodSeconds", min(2, renew - 1) if renew > 1 else 1, 1, MAX_SECONDS)
    if retry >= renew:
        raise ConfigError(
            "spec.retryPeriodSeconds",
            f"must be below renewDeadlineSeconds ({renew}), got {retry}",
        )
    cluster = _bool(spec, "cluster", "spec.cluster")
    if not cluster and len(nodes) == 2:
        raise ConfigError(
            "spec.nodes", "use 1 node (single Redis), 3 or more (RedLock), or cluster: true"
        )
    n = 1 if cluster or len(nodes) == 1 else len(nodes)
    if "quorum" in spec and spec["quorum"] is not None:
        if cluster:
            raise ConfigError("spec.quorum", "does not apply to a Redis Cluster (cluster: true)")
        quorum = _int(spec, "quorum", 0, 1, MAX_NODES)
        if quorum > n:
            raise ConfigError("spec.quorum", f"must not be above the number of nodes ({n})")
        if quorum * 2 <= n:
            raise ConfigError("spec.quorum", f"must be a majority of the {n} nodes")
    else:
        quorum = n // 2 + 1
    tls = spec.get("tls") or {}
    if not isinstance(tls, Mapping):
        raise ConfigError("spec.tls", "must be an object")
    preferred = spec.get("preferredHolder")
    if preferred is not None and (not isinstance(preferred, str) or len(preferred) > 253):
        raise ConfigError("spec.preferredHolder", "must be a string of at most 253 characters")
    return LockSpec(
        keys=keys,
        nodes=nodes,
        ttl_seconds=ttl,
        renew_deadline_seconds=renew,
        retry_period_seconds=retry,
        quorum=quorum,
        cluster=cluster,
        secret_ref=_secret_ref(spec),
        insecure_skip_verify=_bool(tls, "insecureSkipVerify", "spec.tls.insecureSkipVerify"),
        paused=_bool(spec, "paused", "spec.paused"),
        preferred_holder=preferred or None,
    )
