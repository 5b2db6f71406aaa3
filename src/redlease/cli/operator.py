"""``redlease operator``: flags mapped onto kopf's run options (see docs/operator.md) and its
:class:`~redlease.operator.OperatorConfig`, login included."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from redlease.cli import flags
from redlease.cli.command import Command, Flag
from redlease.cli.inject import WEBHOOK, webhook_config
from redlease.cli.login import Pod, operator_login, this_pod
from redlease.core.durations import parse_duration
from redlease.core.timing import TTL_RANGE
from redlease.errors import ConfigError

if TYPE_CHECKING:
    from redlease.kube.leaselock import LeaseElectionConfig
    from redlease.operator import OperatorConfig

SCOPE = "scope"  # --namespace or --all-namespaces

FLAGS = (
    Flag(
        ("--namespace", "-n"),
        "watch this namespace (repeatable; glob patterns allowed); env REDLEASE_NAMESPACE",
        kind="list",
        group=SCOPE,
    ),
    Flag(
        ("--all-namespaces", "-A"),
        "watch every namespace",
        kind="switch",
        group=SCOPE,
        clears="namespace",
    ),
    Flag(
        ("--liveness",), "liveness endpoint URL, e.g. http://0.0.0.0:8080/healthz (default: none)"
    ),
    Flag(("--refresh",), "time between reads", "5", metavar="DURATION"),
    Flag(("--concurrency",), "nodes read at once", "16"),
    Flag(("--node-timeout",), "time per node", "3", metavar="DURATION"),
    Flag(
        ("--metrics",), "serve Prometheus /metrics on HOST:PORT, e.g. 127.0.0.1:9090 (default: off)"
    ),
    Flag(
        ("--verbose", "-v"),
        "debug logging (--log-level debug), kopf's per-object lines too",
        kind="switch",
    ),
    Flag(
        ("--leader-election",),
        "run several replicas: one active (holds a coordination.k8s.io Lease), the others "
        "standing by and serving the webhook",
        kind="switch",
    ),
    Flag(("--lease-name",), "the operator's Lease", "redlease-operator"),
    Flag(("--lease-namespace",), "namespace of the Lease (default: $POD_NAMESPACE, in-cluster)"),
    Flag(("--lease-duration",), "Lease duration", "15", metavar="DURATION"),
    Flag(
        ("--lease-renew-deadline",),
        "stop leading after (default: 2/3 of the duration)",
        metavar="DURATION",
    ),
    Flag(
        ("--lease-retry-period",),
        "renew / retry every (default: 2/15 of the duration)",
        metavar="DURATION",
    ),
    Flag(("--identity",), "this replica's identity (default: $POD_NAME, else hostname:pid)"),
    *WEBHOOK,
    *flags.LOG,
)


def _number(value: str | None, flag: str, lo: float, hi: float, *, duration: bool = False) -> float:
    try:
        number = parse_duration(value or "") if duration else float(value or "")
    except ValueError:
        kind = "a duration (15, 0.5, 15s, 1m30s, 500ms)" if duration else "a number"
        raise ConfigError(flag, f"not {kind}: {value!r}") from None
    if not lo <= number <= hi:
        raise ConfigError(flag, f"must be between {lo:g} and {hi:g}, got {number:g}")
    return number


def operator_config(args: argparse.Namespace, pod: Pod) -> OperatorConfig:
    """The operator's settings from its parsed flags (its login is :func:`main`'s)."""
    from urllib.parse import urlsplit

    from redlease.operator import OperatorConfig

    namespaces = tuple(args.namespace or [])
    clusterwide = bool(args.all_namespaces) and not namespaces
    if not namespaces and not clusterwide:
        raise ConfigError("--namespace", "give --namespace NS (repeatable) or --all-namespaces")
    if args.liveness:
        parts = urlsplit(args.liveness)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ConfigError("--liveness", f"use http://HOST:PORT/PATH, got {args.liveness!r}")
    return OperatorConfig(
        namespaces=namespaces,
        clusterwide=clusterwide,
        liveness=args.liveness or None,
        refresh=_number(args.refresh, "--refresh", 0.05, 3600, duration=True),
        concurrency=int(_number(args.concurrency, "--concurrency", 1, 1024)),
        node_timeout=_number(args.node_timeout, "--node-timeout", 0.05, 60, duration=True),
        verbose=bool(args.verbose),
        metrics=flags.host_port(args.metrics, "--metrics") if args.metrics else None,
        webhook=webhook_config(args),
        election=election_config(args, pod) if args.leader_election else None,
    )


def election_config(args: argparse.Namespace, pod: Pod) -> LeaseElectionConfig:
    """The operator's Lease: name, namespace (the pod's unless given), identity and
    client-go's timing rules."""
    from redlease.core.timing import validate_timing
    from redlease.kube.leaselock import LeaseElectionConfig
    from redlease.kube.spec import validate_object_name

    namespace = args.lease_namespace or pod.namespace
    if not namespace:
        raise ConfigError("--lease-namespace", "needed outside a pod (or set POD_NAMESPACE)")
    names = ("--lease-duration", "--lease-renew-deadline", "--lease-retry-period")
    given = (args.lease_duration, args.lease_renew_deadline, args.lease_retry_period)
    ttl, deadline, retry = (
        _number(value, flag, *TTL_RANGE, duration=True) if value else None
        for value, flag in zip(given, names, strict=True)
    )
    timing = validate_timing(ttl or 15.0, deadline, retry, names=names)
    return LeaseElectionConfig(
        namespace=validate_object_name(namespace, "--lease-namespace"),
        name=validate_object_name(args.lease_name, "--lease-name"),
        identity=flags.identity(args),
        timing=timing,
    )


def main(args: argparse.Namespace) -> int:
    from redlease.cli import logs
    from redlease.operator.runner import run_operator

    # kopf's lines in the same format as every other command's (JSON unless on a terminal)
    logs.configure("debug" if args.verbose else args.log_level, args.log_format)
    pod = this_pod()
    config = operator_config(args, pod)
    login = operator_login(pod, flags.identity(args))
    return run_operator(dataclasses.replace(config, kube=login))


COMMAND = Command(
    name="operator",
    summary="run the DistributedLock operator (kopf)",
    description="Run the DistributedLock operator (kopf): reads every lock's state from Redis "
    "into the object's status, posts Events, serves the sidecar-injection webhook. Needs a "
    "Kubernetes API (in-cluster, or a kubeconfig) and the 'operator' extra.",
    example="redlease operator --namespace apps --metrics 0.0.0.0:9090",
    flags=FLAGS,
    run=main,
    credentials=True,
)
