"""Validated settings of the sidecar and of `redlease run` (pure).

The lock's own model (keys, node set, timing, credentials) lives below: flags go through
:func:`redlease.core.timing.validate_timing` and :func:`redlease.core.connect.validate_target`, a
DistributedLock through :func:`redlease.kube.spec.parse_spec`, and :func:`election_from_spec`
turns the latter into an :class:`ElectionConfig`. This module only adds what is the sidecar's
own: its HTTP address, readiness mode, state directory, drain timeout and Kubernetes settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from redlease.core.connect import Target, Tls
from redlease.core.keys import scoped_name
from redlease.core.primitives import DEFAULT_REPLICA_TIMEOUT
from redlease.core.rules import check_limit
from redlease.core.timing import Timing, validate_timing
from redlease.core.urls import digits
from redlease.errors import ConfigError
from redlease.kube import sidecar_args
from redlease.kube.auth import ClusterAuth
from redlease.kube.names import DEFAULT_READY, LEADER_LABEL, READY_MODES
from redlease.kube.secretspec import Credentials
from redlease.kube.spec import LockSpec, validate_object_name

__all__ = [
    "DEFAULT_READY",
    "LEADER_LABEL",
    "READY_MODES",
    "ElectionConfig",
    "HttpAddress",
    "LockRef",
    "SidecarConfig",
    "Timing",
    "check_holders",
    "election_from_spec",
    "parse_http",
    "parse_lock_ref",
    "validate_timing",
]


@dataclass(frozen=True, slots=True)
class HttpAddress:
    host: str = sidecar_args.LOOPBACK
    port: int = sidecar_args.DEFAULT_HTTP_PORT

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_http(value: str, field_name: str = sidecar_args.HTTP) -> HttpAddress | None:
    """``HOST:PORT`` (``:PORT`` means 127.0.0.1), or ``off``/empty for no HTTP server."""
    if value in ("", "off", "none"):
        return None
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ConfigError(field_name, f"expected HOST:PORT, got {value!r}")
    host = host.strip("[]") or sidecar_args.LOOPBACK
    number = digits(port)
    if number is None:
        raise ConfigError(field_name, f"bad port in {value!r}")
    if not 0 <= number <= 65535:
        raise ConfigError(field_name, f"port must be 0-65535, got {number}")
    return HttpAddress(host, number)


@dataclass(frozen=True, slots=True)
class LockRef:
    """A DistributedLock to read the configuration from, and the Redis credentials and TLS files
    given on the command line or in the environment (then its Secrets are not read: injected
    pods get them from the Secrets as env vars and volumes, so the sidecar needs no access to
    Secrets)."""

    namespace: str
    name: str
    credentials: Credentials | None = field(default=None, repr=False, compare=False)
    tls: Tls | None = field(default=None, compare=False)  # from flags (injected: Secret volumes)
    replica_timeout: float = DEFAULT_REPLICA_TIMEOUT  # --replica-timeout (spec.replicas: how many)
    pinned_nodes: frozenset[str] | None = None  # --pinned-node: the only node URLs to use
    allowed_masters: frozenset[str] = frozenset()  # --allowed-master: what a Sentinel may name

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_lock_ref(
    value: str, namespace: str | None, field_name: str = sidecar_args.LOCK_REF
) -> LockRef:
    """``NAME`` (in the pod's namespace) or ``NAMESPACE/NAME``."""
    ns, _, name = value.rpartition("/")
    ns = ns or namespace or ""
    if not ns:
        raise ConfigError(field_name, "needs NAMESPACE/NAME or the POD_NAMESPACE env var")
    for part in (ns, name):
        validate_object_name(part, field_name)
    return LockRef(ns, name)


@dataclass(frozen=True, slots=True)
class ElectionConfig:
    """What the election needs: the lock's keys, identity, Redis, timing and two policy switches.

    Several ``keys`` are held together as one lease (a DistributedLock's ``spec.keys``); the
    first names the lock on every surface (status ``lock``, the state file). ``replicas``: WAIT
    for that many replicas after every grant and renewal, within ``replica_timeout`` seconds,
    and fail closed if fewer confirm (a Sentinel-managed master; see docs/safety.md).
    ``scope``: a DistributedLock's namespace, whose keys are held in Redis under
    :attr:`redis_keys` (None: the keys are the Redis names, as with ``--lock``).
    ``holders`` > 1 (``--holders``, ``spec.holders``): up to that many replicas lead at once,
    each holding one slot of a counting semaphore over the one key (docs/holders.md).
    """

    keys: tuple[str, ...]
    identity: str
    target: Target
    timing: Timing = field(default_factory=Timing)
    paused: bool = False
    preferred_holder: str | None = None
    replicas: int = 0
    replica_timeout: float = DEFAULT_REPLICA_TIMEOUT
    scope: str | None = None
    holders: int = 1  # N active of M: a counting semaphore of this limit (1: the mutex)

    @property
    def lock(self) -> str:
        return self.keys[0]

    @property
    def redis_keys(self) -> tuple[str, ...]:
        """The lock names used in Redis (:func:`redlease.core.keys.scoped_name`)."""
        return tuple(scoped_name(self.scope, key) for key in self.keys)

    @property
    def redis_lock(self) -> str:
        return self.redis_keys[0]


def election_from_spec(
    spec: LockSpec,
    identity: str,
    credentials: Credentials | None = None,
    replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
) -> ElectionConfig:
    """The election a DistributedLock asks for (identity is the pod's own; the WAIT timeout
    for ``spec.replicas`` is the sidecar's ``--replica-timeout``)."""
    target = spec.target
    if credentials is not None:
        target = target.with_credentials(
            credentials.username, credentials.password, credentials.consent
        )
    return ElectionConfig(
        keys=spec.keys,
        identity=identity,
        target=target,
        timing=spec.timing,
        paused=spec.paused,
        preferred_holder=spec.preferred_holder,
        replicas=spec.replicas,
        replica_timeout=replica_timeout,
        scope=spec.scope,
        holders=spec.holders,
    )


def check_holders(holders: object, keys: tuple[str, ...], field_name: str) -> int:
    """``holders`` checked by the core's rule (:func:`redlease.core.rules.check_limit`), and
    more than 1 only over one key (a semaphore is one lock name), naming ``field_name``."""
    try:
        limit = check_limit(holders)
    except ConfigError as exc:
        raise ConfigError(field_name, exc.message) from None
    if limit > 1 and len(keys) > 1:
        raise ConfigError(
            field_name, f"more than 1 holder needs exactly one key, got {len(keys)} keys"
        )
    return limit


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """Everything `redlease sidecar` runs with: an election from flags, or a ``lock_ref`` to
    read it from (then ``election`` is None until the DistributedLock has been read)."""

    identity: str
    election: ElectionConfig | None
    http: HttpAddress | None = HttpAddress()
    state_dir: Path | None = Path(sidecar_args.STATE_DIR)
    ready: str = DEFAULT_READY
    pod_label: bool = False
    lock_ref: LockRef | None = None
    kube: ClusterAuth | None = None  # None: no Kubernetes API (not in a cluster)
    pod_name: str | None = None  # this pod (POD_NAME): its label, the Events' reporter
    namespace: str | None = None  # this pod's: a --lock-ref without one, the Lease mirror
    metrics: HttpAddress | None = None  # /metrics alone on another address (for scrapers)
    probes: HttpAddress | None = None  # /healthz and /readyz alone (the kubelet's httpGet)
    lease_mirror: bool = False  # keep a coordination.k8s.io Lease named after the lock
    events: bool = False  # post became/stopped-leading Events
    api_locks: str | None = None  # the lock API's name prefix (sidecar/lockapi.py); None: off
    dapr_store: str | None = "redlease"  # Dapr's lock store name (sidecar/dapr.py); None: off
    api_token: str | None = field(default=None, repr=False)  # required by sidecar/apiauth.py
    drain_timeout: float = 0.0  # seconds a planned step-down waits for POST /drained; 0: off
    # the app is stopped before this sidecar's SIGTERM (a native sidecar): no drain on SIGTERM
    app_stops_first: bool = False

    def check_election(self, election: ElectionConfig, holders_field: str) -> None:
        """Refuse what the sidecar's own outputs cannot show for ``election``: the Lease mirror
        names one holder, so it does not go with several (``holders_field``: where they were
        asked for, ``--holders`` or ``spec.holders``). The lock API's prefix must not cover
        the election's own keys: an app could take the lock this sidecar campaigns for."""
        covered = [k for k in election.keys if self.api_locks and k.startswith(self.api_locks)]
        if covered:
            raise ConfigError(
                sidecar_args.API_LOCKS,
                f"the prefix {self.api_locks!r} covers this sidecar's own lock {covered[0]!r}: "
                "an app could hold it and this sidecar would never lead; use another prefix",
            )
        if self.lease_mirror and election.holders > 1:
            raise ConfigError(
                sidecar_args.LEASE_MIRROR,
                f"a Lease names one holder: it cannot mirror {holders_field} = "
                f"{election.holders}; drop --lease-mirror or use 1 holder",
            )

    def lock_object(self, lock: str) -> tuple[str, str]:
        """(namespace, name) of the Kubernetes object named after the lock, for the Lease
        mirror and the Events: the DistributedLock's name with ``--lock-ref``, else the lock
        name itself, which must then be a valid object name."""
        flag = "--lease-mirror" if self.lease_mirror else "--events"
        if self.lock_ref is not None:
            return self.lock_ref.namespace, self.lock_ref.name
        if not self.namespace:
            raise ConfigError(flag, "needs the POD_NAMESPACE env var (or --lock-ref NS/NAME)")
        try:
            name = validate_object_name(lock, flag)
        except ConfigError:
            raise ConfigError(
                flag,
                f"the lock name {lock!r} is not a valid Kubernetes object name (lowercase "
                "letters, digits, '-' and '.'): use such a lock name, or --lock-ref",
            ) from None
        return self.namespace, name
