"""Validated settings of the sidecar and of `redlease run`, and the DistributedLock mapping.

:func:`validate_timing` and :func:`apply_spec` are pure: ``cli.py`` reads flags and env vars,
:mod:`redlease.sidecar.kube` reads the API; both hand plain values to these functions, and every
error is a :class:`~redlease.errors.ConfigError` naming the flag or spec field at fault.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redlease.core.connect import validate_url
from redlease.core.keys import validate_name
from redlease.errors import ConfigError

DEFAULT_TTL = 15.0
READY_MODES = ("leader", "always")
LEADER_LABEL = "redlease.dev/leader"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Timing:
    """Lease timing in seconds, as client-go's leader election names it.

    ``ttl`` is the lease duration in Redis; the leader renews every ``retry_period`` and steps
    down when no renewal succeeded for ``renew_deadline`` (< ttl), so it stops acting as leader
    before the lease could expire and be granted elsewhere.
    """

    ttl: float = DEFAULT_TTL
    renew_deadline: float = DEFAULT_TTL * 2 / 3
    retry_period: float = DEFAULT_TTL * 2 / 15


def validate_timing(
    ttl: float,
    renew_deadline: float | None = None,
    retry_period: float | None = None,
    *,
    names: tuple[str, str, str] = ("--ttl", "--renew-deadline", "--retry-period"),
) -> Timing:
    """Check the three durations; defaults follow client-go (15 s / 10 s / 2 s ratios)."""
    ttl_name, deadline_name, retry_name = names
    if not 0.05 <= ttl <= 86400:
        raise ConfigError(ttl_name, f"must be between 0.05 and 86400 seconds, got {ttl:g}")
    deadline = ttl * 2 / 3 if renew_deadline is None else renew_deadline
    if not 0 < deadline < ttl:
        raise ConfigError(
            deadline_name, f"must be > 0 and less than {ttl_name} ({ttl:g}), got {deadline:g}"
        )
    retry = ttl * 2 / 15 if retry_period is None else retry_period
    if not 0 < retry < deadline:
        raise ConfigError(
            retry_name, f"must be > 0 and less than {deadline_name} ({deadline:g}), got {retry:g}"
        )
    return Timing(float(ttl), float(deadline), float(retry))


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where the lease lives: node URLs and how to talk to them (no secret in ``repr``)."""

    urls: tuple[str, ...]
    cluster: bool = False
    quorum: int | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls_insecure: bool = False  # rediss:// without certificate checks (testing only)

    @property
    def total(self) -> int:
        return 1 if self.cluster else len(self.urls)

    @property
    def needed(self) -> int:
        return self.quorum or self.total // 2 + 1


def validate_target(
    urls: Sequence[str],
    *,
    cluster: bool = False,
    quorum: int | None = None,
    username: str | None = None,
    password: str | None = None,
    field_name: str = "--redis",
    quorum_field: str = "--quorum",
    tls_insecure: bool = False,
) -> RedisTarget:
    if not urls:
        raise ConfigError(field_name, "at least one Redis URL is required")
    for url in urls:
        validate_url(url, field_name)
    if cluster and len(urls) > 1:
        raise ConfigError(field_name, "a cluster is given by one seed URL, not several")
    if quorum is not None and not 1 <= quorum <= len(urls):
        raise ConfigError(quorum_field, f"must be between 1 and {len(urls)}, got {quorum}")
    if quorum is not None and len(urls) > 1 and quorum <= len(urls) // 2:
        raise ConfigError(quorum_field, f"must be a majority of {len(urls)} nodes, got {quorum}")
    return RedisTarget(
        tuple(urls), cluster, quorum, username or None, password or None, tls_insecure
    )


@dataclass(frozen=True, slots=True)
class HttpAddress:
    host: str = "127.0.0.1"
    port: int = 4040

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_http(value: str, field_name: str = "--http") -> HttpAddress | None:
    """``HOST:PORT`` (``:PORT`` means 127.0.0.1), or ``off``/empty for no HTTP server."""
    if value in ("", "off", "none"):
        return None
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ConfigError(field_name, f"expected HOST:PORT, got {value!r}")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(field_name, f"bad port in {value!r}") from None
    if not 0 <= number <= 65535:
        raise ConfigError(field_name, f"port must be 0-65535, got {number}")
    return HttpAddress(host, number)


@dataclass(frozen=True, slots=True)
class LockRef:
    """A DistributedLock to read the configuration from."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_lock_ref(value: str, namespace: str | None, field_name: str = "--lock-ref") -> LockRef:
    """``NAME`` (in the pod's namespace) or ``NAMESPACE/NAME``."""
    ns, _, name = value.rpartition("/")
    ns = ns or namespace or ""
    if not ns:
        raise ConfigError(field_name, "needs NAMESPACE/NAME or the POD_NAMESPACE env var")
    for part in (ns, name):
        if not _DNS_LABEL.match(part):
            raise ConfigError(field_name, f"not a valid Kubernetes name: {part!r}")
    return LockRef(ns, name)


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """How to reach the Kubernetes API (in-cluster by default) and who this pod is."""

    api: str | None = None  # https://HOST:PORT; None: not running in a cluster
    token_file: Path | None = None
    ca_file: Path | None = None
    pod_name: str | None = None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    """What the election needs: lock, identity, Redis, timing and the two policy switches."""

    lock: str
    identity: str
    target: RedisTarget
    timing: Timing = Timing()
    paused: bool = False
    preferred_holder: str | None = None


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """Everything `redlease sidecar` runs with."""

    election: ElectionConfig
    http: HttpAddress | None = HttpAddress()
    state_dir: Path | None = Path("/var/run/redlease")
    ready: str = "leader"
    pod_label: bool = False
    lock_ref: LockRef | None = None
    kube: KubeSettings = KubeSettings()


def validate_identity(identity: str, field_name: str = "--identity") -> str:
    if not identity or len(identity) > 253 or any(c.isspace() for c in identity):
        raise ConfigError(field_name, f"must be 1-253 characters without spaces, got {identity!r}")
    return identity


def validate_lock(name: str, field_name: str = "--lock") -> str:
    try:
        return validate_name(name)
    except ConfigError as exc:
        raise ConfigError(field_name, exc.message) from None


# --- DistributedLock spec -> configuration (pure) -----------------------------------------------


@dataclass(frozen=True, slots=True)
class SecretRef:
    """``spec.auth.secretRef``: the Secret and the keys of password and (optional) username."""

    name: str
    password_key: str = "password"  # noqa: S105 - a key name, not a password
    username_key: str = "username"


def secret_ref(spec: Mapping[str, Any]) -> SecretRef | None:
    """The Secret named by ``spec.auth.secretRef`` (None when the spec has no auth)."""
    auth = spec.get("auth") or {}
    if not isinstance(auth, Mapping):
        raise ConfigError("spec.auth", "must be an object")
    ref = auth.get("secretRef")
    if not ref:
        return None
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
        raise ConfigError("spec.auth.secretRef.name", "must be a string")
    password_key = ref.get("passwordKey") or ref.get("key") or "password"
    username_key = ref.get("usernameKey") or "username"
    for field_name, value in (("passwordKey", password_key), ("usernameKey", username_key)):
        if not isinstance(value, str):
            raise ConfigError(f"spec.auth.secretRef.{field_name}", "must be a string")
    return SecretRef(ref["name"], password_key, username_key)


def secret_value(secret: Mapping[str, Any], key: str, secret_name: str) -> str:
    """Decode ``data[key]`` (base64) or ``stringData[key]`` of a Secret object."""
    data = secret.get("data") or {}
    if key in data:
        try:
            return base64.b64decode(data[key], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            raise ConfigError(
                "spec.auth.secretRef", f"Secret {secret_name!r} key {key!r} is not valid base64"
            ) from None
    string_data = secret.get("stringData") or {}
    if key in string_data:
        return str(string_data[key])
    raise ConfigError("spec.auth.secretRef.key", f"Secret {secret_name!r} has no key {key!r}")


def _number(spec: Mapping[str, Any], key: str) -> float | None:
    value = spec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"spec.{key}", f"must be a number, got {value!r}")
    return float(value)


def _tls_insecure(tls: Any) -> bool:
    if tls is None:
        return False
    if not isinstance(tls, Mapping):
        raise ConfigError("spec.tls", "must be an object")
    value = tls.get("insecureSkipVerify", False)
    if not isinstance(value, bool):
        raise ConfigError("spec.tls.insecureSkipVerify", "must be true or false")
    return value


def apply_spec(
    base: ElectionConfig,
    spec: Mapping[str, Any],
    *,
    password: str | None = None,
    username: str | None = None,
) -> ElectionConfig:
    """The election settings a DistributedLock ``spec`` asks for, over ``base`` (pure).

    ``base`` keeps what the spec does not say (identity, and the flags' values as defaults).
    Errors name the spec field.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError("spec", "must be an object")
    keys = spec.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise ConfigError("spec.keys", "must be a non-empty list of strings")
    # the first key is the primary: the one sidecars elect on
    lock = validate_lock(keys[0], "spec.keys[0]")
    ttl = _number(spec, "ttlSeconds")
    timing = validate_timing(
        base.timing.ttl if ttl is None else ttl,
        _number(spec, "renewDeadlineSeconds")
        if spec.get("renewDeadlineSeconds") is not None
        else (None if ttl is not None else base.timing.renew_deadline),
        _number(spec, "retryPeriodSeconds")
        if spec.get("retryPeriodSeconds") is not None
        else (None if ttl is not None else base.timing.retry_period),
        names=("spec.ttlSeconds", "spec.renewDeadlineSeconds", "spec.retryPeriodSeconds"),
    )
    nodes = spec.get("nodes")
    if nodes is None:
        urls = list(base.target.urls)
    else:
        if not isinstance(nodes, list) or not nodes:
            raise ConfigError("spec.nodes", "must be a non-empty list of {url}")
        urls = []
        for i, node in enumerate(nodes):
            if not isinstance(node, Mapping) or not isinstance(node.get("url"), str):
                raise ConfigError(f"spec.nodes[{i}].url", "must be a string")
            urls.append(node["url"])
    quorum = spec.get("quorum")
    if quorum is not None and (isinstance(quorum, bool) or not isinstance(quorum, int)):
        raise ConfigError("spec.quorum", f"must be an integer, got {quorum!r}")
    for flag in ("cluster", "paused"):
        if spec.get(flag) is not None and not isinstance(spec.get(flag), bool):
            raise ConfigError(f"spec.{flag}", "must be true or false")
    preferred = spec.get("preferredHolder") or None
    if preferred is not None:
        if not isinstance(preferred, str):
            raise ConfigError("spec.preferredHolder", "must be a string")
        validate_identity(preferred, "spec.preferredHolder")
    target = validate_target(
        urls,
        cluster=bool(spec.get("cluster", base.target.cluster)),
        quorum=quorum,
        username=username if username is not None else base.target.username,
        password=password if password is not None else base.target.password,
        field_name="spec.nodes",
        quorum_field="spec.quorum",
        tls_insecure=_tls_insecure(spec.get("tls")),
    )
    return dataclasses.replace(
        base,
        lock=lock,
        target=target,
        timing=timing,
        paused=bool(spec.get("paused", False)),
        preferred_holder=preferred,
    )
