"""The DistributedLock spec model: API names, parsing, defaults, validation, Secret decoding.

Pure (no I/O). The operator, the sidecar's ``--lock-ref`` and ``redlease run --lock-ref`` all
read a DistributedLock through :func:`parse_spec`; the command-line flags go through the same
:func:`validate_timing` and :func:`~redlease.core.connect.validate_target`. The CRD's schema and
CEL rules (crds/distributedlock.yaml) say the same things for the API server; a table-driven
test feeds the same examples to both and expects the same verdict. Every error is a
:class:`~redlease.errors.ConfigError` whose ``field`` is the JSON path (``spec.nodes[1].url``).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease.core.connect import Target, Tls, validate_target
from redlease.core.keys import validate_identity, validate_name
from redlease.errors import ConfigError

# --- API names (one place: the operator, the sidecar, the chart tests and the docs use these) ---

GROUP = "redlease.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DistributedLock"
PLURAL = "distributedlocks"
FORCE_RELEASE_ANNOTATION = f"{GROUP}/force-release"
LEADER_LABEL = f"{GROUP}/leader"
# A Secret opts in to being read by redlease (operator, sidecar) with this label set to "true",
# and may name the only nodes its credentials may be sent to (comma-separated host:port).
CREDENTIALS_LABEL = f"{GROUP}/credentials"
ALLOWED_NODES_ANNOTATION = f"{GROUP}/allowed-nodes"

# How a sidecar answers /readyz (`--ready`, the `redlease.dev/ready` annotation): connected
# (up and reaching a quorum; the default), leader, always. See docs/sidecar.md.
READY_MODES = ("connected", "leader", "always")
DEFAULT_READY = "connected"

MAX_KEYS = 16
MAX_NODES = 15
MAX_SECONDS = 3600
DEFAULT_TTL = 15
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")  # a DNS-1123 subdomain
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def validate_object_name(value: object, field: str) -> str:
    """A Kubernetes object or namespace name (DNS-1123 subdomain), else :class:`ConfigError`."""
    if not isinstance(value, str) or not _K8S_NAME.fullmatch(value):
        raise ConfigError(field, f"not a valid Kubernetes name: {value!r}")
    return value


# --- timing ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    """Lease timing in seconds, named as client-go's leader election names it.

    ``ttl`` is the lease duration in Redis; a leader renews every ``retry_period`` and steps
    down when no renewal succeeded for ``renew_deadline`` (< ttl), so it stops acting as leader
    before the lease could expire and be granted elsewhere.
    """

    ttl: float = float(DEFAULT_TTL)
    renew_deadline: float = DEFAULT_TTL * 2 / 3
    retry_period: float = DEFAULT_TTL * 2 / 15


def default_renew_deadline(ttl: float) -> float:
    """client-go's ratio (15 s lease, 10 s renew deadline): two thirds of the TTL."""
    return ttl * 2 / 3


def default_retry_period(ttl: float) -> float:
    """client-go's ratio (15 s lease, 2 s retry period): two fifteenths of the TTL."""
    return ttl * 2 / 15


def validate_timing(
    ttl: float,
    renew_deadline: float | None = None,
    retry_period: float | None = None,
    *,
    names: tuple[str, str, str] = ("--ttl", "--renew-deadline", "--retry-period"),
    bounds: tuple[float, float] = (0.05, 86400.0),
) -> Timing:
    """The relations every timing must satisfy: retry < renew deadline < ttl (defaults from
    :func:`default_renew_deadline` and :func:`default_retry_period`)."""
    ttl_name, deadline_name, retry_name = names
    lo, hi = bounds
    if not lo <= ttl <= hi:
        raise ConfigError(ttl_name, f"must be between {lo:g} and {hi:g} seconds, got {ttl:g}")
    deadline = default_renew_deadline(ttl) if renew_deadline is None else renew_deadline
    if not 0 < deadline < ttl:
        raise ConfigError(
            deadline_name, f"must be > 0 and below {ttl_name} ({ttl:g}), got {deadline:g}"
        )
    retry = default_retry_period(ttl) if retry_period is None else retry_period
    if not 0 < retry < deadline:
        raise ConfigError(
            retry_name, f"must be > 0 and below {deadline_name} ({deadline:g}), got {retry:g}"
        )
    return Timing(float(ttl), float(deadline), float(retry))


# --- credentials -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SecretRef:
    """``spec.auth.secretRef``: a Secret in the lock's namespace and the keys of its entries."""

    name: str
    username_key: str = "username"
    password_key: str = "password"  # noqa: S105 - the name of a key, not a password


@dataclass(frozen=True, slots=True)
class Credentials:
    """Username and password read from a Secret (never in ``repr``)."""

    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)


def credentials_from_secret(
    secret: Mapping[str, Any], ref: SecretRef, nodes: Sequence[str] = ()
) -> Credentials:
    """Decode the entries ``ref`` names from a Secret object (``data`` is base64,
    ``stringData`` plain). The password entry is required, the username entry optional.

    Secrets only by consent: whoever may write a DistributedLock chooses its Secret and its
    nodes, so redlease uses a Secret only if it carries ``redlease.dev/credentials: "true"``,
    and, if it lists ``redlease.dev/allowed-nodes``, only for those ``nodes`` (node names as
    :attr:`Target.names` gives them). See docs/security.md.
    """
    check_consent(secret, ref, nodes)
    password = _secret_entry(secret, ref, ref.password_key, "passwordKey")
    if password is None:
        raise ConfigError(
            "spec.auth.secretRef.passwordKey",
            f"Secret {ref.name!r} has no entry {ref.password_key!r}",
        )
    username = _secret_entry(secret, ref, ref.username_key, "usernameKey")
    return Credentials(username or None, password)


def check_consent(secret: Mapping[str, Any], ref: SecretRef, nodes: Sequence[str] = ()) -> None:
    """Raise :class:`ConfigError` unless the Secret opted in (see
    :func:`credentials_from_secret`)."""
    meta = secret.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(CREDENTIALS_LABEL) != "true":
        raise ConfigError(
            "spec.auth.secretRef.name",
            f"Secret {ref.name!r} has not opted in: label it {CREDENTIALS_LABEL}=true to let "
            "redlease send its credentials to the lock's nodes (docs/security.md)",
        )
    allowed = (meta.get("annotations") or {}).get(ALLOWED_NODES_ANNOTATION)
    if allowed is not None:
        permitted = {n.strip() for n in str(allowed).split(",") if n.strip()}
        refused = [n for n in nodes if n not in permitted]
        if refused:
            raise ConfigError(
                "spec.nodes",
                f"Secret {ref.name!r} allows its credentials only for {sorted(permitted)}, "
                f"not for {', '.join(refused)} ({ALLOWED_NODES_ANNOTATION})",
            )


def _secret_entry(secret: Mapping[str, Any], ref: SecretRef, key: str, what: str) -> str | None:
    data = secret.get("data") or {}
    if key in data:
        try:
            return base64.b64decode(str(data[key]), validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise ConfigError(
                f"spec.auth.secretRef.{what}",
                f"entry {key!r} of Secret {ref.name!r} is not valid base64 UTF-8",
            ) from None
    string_data = secret.get("stringData") or {}
    return str(string_data[key]) if key in string_data else None


# --- the spec --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockSpec:
    """A validated DistributedLock spec. ``target`` carries no credentials: they come from
    ``secret_ref`` (see :meth:`Target.with_credentials`)."""

    keys: tuple[str, ...]
    target: Target
    timing: Timing = Timing()
    secret_ref: SecretRef | None = None
    paused: bool = False
    preferred_holder: str | None = None

    @property
    def name(self) -> str:
        """The primary key: the lock name shown by the sidecar and used for its state file."""
        return self.keys[0]

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
        validate_name(key, f"spec.keys[{i}]")
    if len(set(keys)) != len(keys):
        raise ConfigError("spec.keys", "keys must be unique")
    return tuple(keys)


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


def _secret_ref(spec: Mapping[str, Any]) -> SecretRef | None:
    if spec.get("auth") is None:
        return None
    auth = _object(spec.get("auth"), "spec.auth")
    ref = _object(auth.get("secretRef"), "spec.auth.secretRef", required=True)
    name = validate_object_name(ref.get("name"), "spec.auth.secretRef.name")
    values = {}
    for key, default in (("usernameKey", "username"), ("passwordKey", "password")):
        value = ref.get(key, default)
        if not isinstance(value, str) or not _SECRET_KEY.fullmatch(value):
            raise ConfigError(f"spec.auth.secretRef.{key}", f"not a Secret key: {value!r}")
        values[key] = value
    return SecretRef(name, values["usernameKey"], values["passwordKey"])


def _tls(spec: Mapping[str, Any]) -> Tls:
    tls = _object(spec.get("tls"), "spec.tls")
    skip = _boolean(tls, "insecureSkipVerify", "spec.tls.insecureSkipVerify")
    return Tls(insecure_skip_verify=skip)


def parse_spec(spec: object) -> LockSpec:
    """Validate a DistributedLock's ``.spec`` into a :class:`LockSpec`.

    Raises :class:`ConfigError` naming the first bad field. Defaults: ``ttlSeconds`` 15,
    ``renewDeadlineSeconds`` two thirds and ``retryPeriodSeconds`` two fifteenths of the TTL
    (client-go's ratios), quorum a majority of the nodes.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError("spec", "is required and must be an object")
    keys = _keys(spec)
    urls = _urls(spec)
    ttl = _integer(spec, "ttlSeconds", 1, MAX_SECONDS)
    renew = _integer(spec, "renewDeadlineSeconds", 1, MAX_SECONDS)
    retry = _integer(spec, "retryPeriodSeconds", 1, MAX_SECONDS)
    timing = validate_timing(
        DEFAULT_TTL if ttl is None else ttl,
        renew,
        retry,
        names=("spec.ttlSeconds", "spec.renewDeadlineSeconds", "spec.retryPeriodSeconds"),
        bounds=(1, MAX_SECONDS),
    )
    cluster = _boolean(spec, "cluster", "spec.cluster")
    quorum = _integer(spec, "quorum", 1, MAX_NODES)
    target = validate_target(
        urls,
        cluster=cluster,
        quorum=quorum,
        tls=_tls(spec),
        credentials_in_urls=False,
        field="spec.nodes",
        url_field="spec.nodes[{i}].url",
        quorum_field="spec.quorum",
    )
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
    )
