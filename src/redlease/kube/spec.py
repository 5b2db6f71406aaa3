"""The DistributedLock spec model: API names, parsing, defaults, validation, Secret decoding.

Pure (no I/O). The operator, the sidecar's ``--lock-ref`` and ``redlease run --lock-ref`` all
read a DistributedLock through :func:`parse_spec`; the command-line flags go through the same
:func:`~redlease.core.timing.validate_timing` and
:func:`~redlease.core.connect.validate_target`. The CRD's schema and CEL rules
(crds/distributedlock.yaml) say the same things for the API server; a table-driven test feeds
the same examples to both and expects the same verdict. Every error is a
:class:`~redlease.errors.ConfigError` whose ``field`` is the JSON path (``spec.nodes[1].url``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease.core.connect import Target, Tls, validate_target, with_pem
from redlease.core.keys import scoped_name, validate_identity, validate_name
from redlease.core.rules import MAX_HOLDERS
from redlease.core.timing import DEFAULT_TTL, TTL_RANGE, Timing, validate_timing
from redlease.core.urls import Consent
from redlease.core.urls import check_consent as check_urls
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
# A DistributedLock's keys are scoped to its namespace in Redis (namespace#key) unless the
# cluster admin labels the Namespace with this set to "true": then they are used as written,
# shared with every namespace so labelled and with plain `--lock` clients. Namespace labels are
# the admin's (as Pod Security Admission's are): a namespace's own users cannot set them.
SHARED_KEYS_LABEL = f"{GROUP}/shared-keys"

# How a sidecar answers /readyz (`--ready`, the `redlease.dev/ready` annotation): connected
# (up and reaching a quorum; the default), leader, always. See docs/sidecar.md. Here because
# the sidecar and the operator's injection both use them, and neither imports the other.
READY_MODES = ("connected", "leader", "always")
DEFAULT_READY = "connected"

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


# --- the fields a DistributedLock may have ---------------------------------------------------

# Every field of a DistributedLock, at every level, as the CRD's openAPIV3Schema declares them
# (a test holds the two together). A name maps to None (a value, or an object whose content is
# not checked here: metadata, status), to a dict (an object with these fields), or to a list of
# one dict (a list of such objects). The API server silently drops what it does not declare
# (a structural schema prunes), so a misspelled optional field would take its default unseen:
# :func:`unknown_fields` names them, as ``kubectl apply --validate=strict`` does.
Fields = Mapping[str, "Fields | list[Fields] | None"]
_SECRET_REF: Fields = {"name": None, "usernameKey": None, "passwordKey": None}
SPEC_FIELDS: Fields = {
    "keys": None,
    "ttlSeconds": None,
    "renewDeadlineSeconds": None,
    "retryPeriodSeconds": None,
    "nodes": [{"url": None}],
    "quorum": None,
    "cluster": None,
    "replicas": None,
    "auth": {"secretRef": _SECRET_REF},
    "tls": {
        "insecureSkipVerify": None,
        "caSecretRef": {"name": None, "key": None},
        "clientCertSecretRef": {"name": None, "certKey": None, "keyKey": None},
    },
    "holders": None,
    "paused": None,
    "preferredHolder": None,
    "strictRestart": None,
}
OBJECT_FIELDS: Fields = {
    "apiVersion": None,
    "kind": None,
    "metadata": None,
    "spec": SPEC_FIELDS,
    "status": None,
}
# What to say where the field's name is not close to one of its level's (keyed by the path of
# the level with list indexes written as []): a node is a URL only.
_LEVEL_HINTS = {
    "spec.nodes[]": "a node has only url; credentials go in spec.auth.secretRef",
}


def unknown_fields(
    obj: object, fields: Fields = OBJECT_FIELDS, where: str = ""
) -> list[ConfigError]:
    """Every field of ``obj`` (a DistributedLock, or the part of one at ``where``) that its
    level does not declare, in document order: a :class:`ConfigError` whose ``field`` is the
    path (``spec.nodes[0].pasword``) and whose message offers the closest declared name
    (``did you mean ttlSeconds?``). Values of the wrong type are :func:`parse_spec`'s to
    report, so they are not descended into."""
    if not isinstance(obj, Mapping):
        return []
    found: list[ConfigError] = []
    for name, value in obj.items():
        path = f"{where}.{name}" if where else str(name)
        if name not in fields:
            found.append(ConfigError(path, _unknown_message(str(name), fields, where)))
            continue
        child = fields[name]
        if isinstance(child, list) and isinstance(value, list):
            for i, item in enumerate(value):
                found += unknown_fields(item, child[0], f"{path}[{i}]")
        elif isinstance(child, Mapping):
            found += unknown_fields(value, child, path)
    return found


def _unknown_message(name: str, fields: Fields, where: str) -> str:
    """``unknown field`` and a did-you-mean: the closest name of the level (difflib, case
    folded), else the level's hint, else the names it has."""
    folded = {known.lower(): known for known in fields}
    close = difflib.get_close_matches(name.lower(), list(folded), n=1, cutoff=0.6)
    if close:
        return f"unknown field (did you mean {folded[close[0]]}?)"
    hint = _LEVEL_HINTS.get(re.sub(r"\[\d+\]", "[]", where))
    return f"unknown field ({hint or 'known here: ' + ', '.join(fields)})"


# --- credentials -----------------------------------------------------------------------------


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
    tls_refs: TlsRefs = TlsRefs()
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
