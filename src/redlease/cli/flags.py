"""The flag groups several commands share, and what each group builds.

``CONNECTION`` (the lock and its Redis nodes: status, retire, sidecar, run), ``ELECTION``
(timing, identity, replicas: sidecar, run), ``LOCK_REF`` (a DistributedLock instead:
sidecar, run) and ``LOG``. The sidecar's flag names and defaults come from
:mod:`redlease.kube.sidecar_args`, the declaration the injector writes from. Heavy imports
stay inside the builders: a command whose extra is not installed still parses.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from redlease.cli.command import Flag
from redlease.core.durations import positive_duration
from redlease.core.primitives import DEFAULT_REPLICA_TIMEOUT
from redlease.core.timing import DEFAULT_TTL
from redlease.errors import ConfigError
from redlease.kube import sidecar_args as sa

if TYPE_CHECKING:
    from redlease.core.connect import Target, Tls
    from redlease.sidecar.config import ElectionConfig, LockRef


def count(value: str) -> int:
    """An integer >= 0 (argparse ``type``)."""
    from redlease.core.urls import digits

    number = digits(value)
    if number is None or number < 0:
        raise ValueError(value)
    return number


count.__name__ = "count (integer >= 0)"


def exit_status(value: str) -> int:
    """A process exit status, 0 to 255 (argparse ``type``)."""
    number = count(value)
    if number > 255:
        raise ValueError(value)
    return number


exit_status.__name__ = "exit status (0 to 255)"


CONNECTION = (
    Flag(("--lock",), "lock name (Redis key {NAME})"),
    Flag(
        ("--redis",),
        "redis://, rediss://, unix:// or redis+sentinel://h1:p1,h2:p2/service URL; "
        "repeat for a RedLock set of 3 or more (env: comma-separated)",
        kind="list",
        metavar="URL",
    ),
    Flag(("--cluster",), "the URL is a Redis Cluster seed", kind="switch"),
    Flag(("--quorum",), "nodes that must agree (default: majority)", parse=int),
    Flag(
        ("--strict-restart",),
        "RedLock: a node that lost its data rejoins only when N-q+1 nodes kept theirs, else "
        "an operator must act (default: by itself after restart_delay, clock-seeded)",
        kind="switch",
    ),
    Flag(("--username",), "Redis ACL user"),
    Flag(("--password",), "Redis password (prefer REDLEASE_PASSWORD)"),
    Flag((sa.TLS_CA_FILE_FLAG,), "CA bundle to verify rediss:// nodes", metavar="PEM"),
    Flag((sa.TLS_CERT_FILE_FLAG,), "client certificate (mTLS)", metavar="PEM"),
    Flag((sa.TLS_KEY_FILE_FLAG,), "client certificate's key (mTLS)", metavar="PEM"),
    Flag(("--tls-insecure-skip-verify",), "no certificate check (testing)", kind="switch"),
)

ELECTION = (
    Flag(("--ttl",), "lease duration", float(DEFAULT_TTL), positive_duration, metavar="DURATION"),
    Flag(
        ("--renew-deadline",),
        "step down after (default: 2/3 of --ttl)",
        parse=positive_duration,
        metavar="DURATION",
    ),
    Flag(
        ("--retry-period",),
        "retry/renew every (default: 2/15 of --ttl)",
        parse=positive_duration,
        metavar="DURATION",
    ),
    Flag(("--identity",), "candidate identity (default: $POD_NAME, else hostname:pid)"),
    Flag(("--paused",), "make no new acquisitions", kind="switch"),
    Flag(("--preferred-holder",), "planned hand-off to ID", metavar="ID"),
    Flag(
        ("--replicas",),
        "WAIT for N replicas after every grant and renewal; fail closed if fewer",
        0,
        count,
    ),
    Flag(
        ("--replica-timeout",),
        "how long WAIT may take",
        DEFAULT_REPLICA_TIMEOUT,
        positive_duration,
        metavar="DURATION",
    ),
)

LOCK_REF = (
    Flag(
        (sa.LOCK_REF,),
        "keys, nodes, timing and credentials from a DistributedLock (followed live)",
        metavar="[NS/]NAME",
    ),
    Flag(
        (sa.PINNED_NODE,),
        "with --lock-ref: use only these node URLs (repeat per node; the injector pins "
        "the nodes whose consent it checked)",
        kind="list",
        metavar="URL",
    ),
    Flag(
        (sa.ALLOWED_MASTER,),
        "with --lock-ref and given credentials: the only masters (redis://HOST:PORT) a "
        "Sentinel may name (repeat; the injector writes those the lock's Secret allows)",
        kind="list",
        metavar="URL",
    ),
    Flag(("--kube-api",), "Kubernetes API (default: in-cluster)", metavar="URL"),
)

LOG = (
    Flag(
        ("--log-level",),
        "least severe level logged",
        "info",
        choices=("debug", "info", "warning", "error"),
    ),
    Flag(
        ("--log-format",),
        "auto: console on a terminal, JSON lines otherwise",
        "auto",
        choices=("auto", "json", "console"),
    ),
)


def host_port(value: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` of a listening flag (``--metrics``, ``--webhook``)."""
    from redlease.core.urls import digits

    host, sep, port = value.rpartition(":")
    number = digits(port)
    if not sep or not host or number is None or not 0 < number < 65536:
        raise ConfigError(flag, f"use HOST:PORT, got {value!r}")
    return host, number


def identity(args: argparse.Namespace) -> str:
    """``--identity``, else the library's default ($POD_NAME, else ``hostname:pid``: unique per
    process, so two commands on one host never share one)."""
    from redlease.core.handles import default_identity
    from redlease.core.keys import validate_identity

    return validate_identity(args.identity or default_identity(), "--identity")


def url_shaped(value: str, flag: str) -> str:
    """``value`` if it has a scheme; a bare ``HOST[:PORT]`` gets the URL it likely meant
    (``127.0.0.1:6379`` -> "did you mean redis://127.0.0.1:6379/0?") instead of a parse error."""
    if "://" in value:
        return value
    host = value.strip().rstrip("/")
    if not host or "/" in host or "@" in host:
        raise ConfigError(flag, f"{value!r} is not a URL: use redis://HOST:PORT/DB")
    port = "" if host.rpartition(":")[2].isdigit() and ":" in host else ":6379"
    raise ConfigError(flag, f"{value!r} is not a URL: did you mean redis://{host}{port}/0?")


def tls(args: argparse.Namespace) -> Tls | None:
    """TLS settings from the ``--tls-*`` flags (None when none is given)."""
    from redlease.core.connect import validate_tls

    given = (args.tls_ca_file, args.tls_cert_file, args.tls_key_file)
    if not args.tls_insecure_skip_verify and not any(given):
        return None
    return validate_tls(
        insecure_skip_verify=bool(args.tls_insecure_skip_verify),
        ca_file=args.tls_ca_file or None,
        cert_file=args.tls_cert_file or None,
        key_file=args.tls_key_file or None,
    )


def target(args: argparse.Namespace) -> Target:
    """The node set from ``--redis``/``--cluster``/``--quorum``, credential and TLS flags."""
    from redlease.core.connect import Tls, validate_target

    if not args.redis:
        raise ConfigError("--redis", "at least one URL is required (or REDLEASE_REDIS)")
    for url in args.redis:
        url_shaped(url, "--redis")
    return validate_target(
        args.redis,
        cluster=args.cluster,
        quorum=args.quorum,
        strict_restart=bool(args.strict_restart),
        username=args.username,
        password=args.password,
        tls=tls(args) or Tls(),
    )


def lock_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """``--lock``, checked as a lock name."""
    from redlease.core.keys import validate_name

    if not args.lock:
        raise ConfigError("--lock", "is required (or REDLEASE_LOCK)")
    return (validate_name(args.lock, "--lock"),)


def replication(args: argparse.Namespace) -> tuple[int, float]:
    """``--replicas``/``--replica-timeout`` checked by the library's own rule."""
    from redlease.core.primitives import validate_replication

    names = ("--replicas", "--replica-timeout")
    return validate_replication(args.replicas, args.replica_timeout, names)


def election_config(args: argparse.Namespace) -> ElectionConfig:
    """The election of ``--lock`` on ``--redis`` with the ``ELECTION`` flags."""
    from redlease.core.keys import validate_identity
    from redlease.core.timing import validate_timing
    from redlease.sidecar.config import ElectionConfig

    keys, holder, node_set = lock_keys(args), identity(args), target(args)
    timing = validate_timing(args.ttl, args.renew_deadline, args.retry_period)
    preferred = args.preferred_holder
    if preferred:
        preferred = validate_identity(preferred, "--preferred-holder")
    replicas, replica_timeout = replication(args)
    return ElectionConfig(
        keys=keys,
        identity=holder,
        target=node_set,
        timing=timing,
        paused=args.paused,
        preferred_holder=preferred or None,
        replicas=replicas,
        replica_timeout=replica_timeout,
    )


def lock_ref(args: argparse.Namespace, namespace: str | None) -> LockRef | None:
    """``--lock-ref`` in ``namespace`` unless it names one (then ``--lock``/``--redis`` must
    not be given: the object says it all); None without it."""
    from redlease.sidecar.config import parse_lock_ref

    if not args.lock_ref:
        for flag, given in ((sa.PINNED_NODE, args.pinned_node),
                            (sa.ALLOWED_MASTER, args.allowed_master)):  # fmt: skip
            if given:
                raise ConfigError(flag, f"needs {sa.LOCK_REF} (it pins that lock's nodes)")
        return None
    for flag, value in (("--lock", args.lock), ("--redis", args.redis)):
        if value:
            raise ConfigError(flag, "cannot be combined with --lock-ref (the DistributedLock "
                              "gives the keys and nodes)")  # fmt: skip
    if args.replicas:
        raise ConfigError("--replicas", "cannot be combined with --lock-ref (the "
                          "DistributedLock gives spec.replicas)")  # fmt: skip
    if args.strict_restart:
        raise ConfigError("--strict-restart", "cannot be combined with --lock-ref (the "
                          "DistributedLock gives spec.strictRestart)")  # fmt: skip
    ref = replace(parse_lock_ref(args.lock_ref, namespace), replica_timeout=replication(args)[1])
    if args.pinned_node:
        from redlease.core.urls import validate_url

        pinned = [
            validate_url(url_shaped(u, sa.PINNED_NODE), sa.PINNED_NODE, credentials=False)
            for u in args.pinned_node
        ]
        ref = replace(ref, pinned_nodes=frozenset(pinned))
    if args.allowed_master:
        from redlease.core.urls import Consent

        masters = Consent.parse(",".join(args.allowed_master), sa.ALLOWED_MASTER).masters()
        if len(masters) != len(set(args.allowed_master)):
            raise ConfigError(sa.ALLOWED_MASTER, "takes redis://HOST:PORT or rediss://HOST:PORT")
        ref = replace(ref, allowed_masters=frozenset(masters))
    given_tls = tls(args)
    if given_tls is not None:  # given (injected pods: from the spec.tls Secrets as volumes)
        ref = replace(ref, tls=given_tls)
    if args.password:  # given (injected pods: from the Secret via env): the Secret is not read
        from redlease.kube.secretspec import Credentials

        ref = replace(ref, credentials=Credentials(args.username or None, args.password))
    return ref
