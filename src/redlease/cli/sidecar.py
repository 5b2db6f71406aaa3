"""``redlease sidecar``: its flags (names and defaults from :mod:`redlease.kube.sidecar_args`,
the ones the injector writes) and its :class:`~redlease.sidecar.config.SidecarConfig`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from redlease.cli import flags
from redlease.cli.command import Command, Flag
from redlease.cli.login import Pod, sidecar_login, this_pod
from redlease.core.durations import parse_duration
from redlease.kube import sidecar_args as sa
from redlease.kube.names import DEFAULT_READY, READY_MODES

if TYPE_CHECKING:
    from redlease.kube.auth import ClusterAuth
    from redlease.sidecar.config import SidecarConfig

OWN = (
    Flag((sa.HTTP,), "HOST:PORT, or 'off'", sa.DEFAULT_HTTP),
    Flag(
        (sa.METRICS,), "also serve /metrics alone on HOST:PORT (for scrapers)", sa.DEFAULT_METRICS
    ),
    Flag(
        (sa.PROBES,),
        "also serve /healthz and /readyz alone on HOST:PORT, for the kubelet's httpGet probes "
        "(no lock data: /status stays on --http)",
        sa.DEFAULT_PROBES,
    ),
    Flag((sa.STATE_DIR_FLAG,), "state file directory; '' for none", sa.STATE_DIR),
    Flag(
        (sa.READY,),
        "/readyz: 'connected' (default: up and reaching a quorum of nodes), 'leader', 'always'",
        DEFAULT_READY,
        choices=READY_MODES,
    ),
    Flag(
        (sa.API_LOCKS,),
        "serve the lock API (POST /locks/NAME/acquire|extend|release) for lock names starting "
        "with PREFIX, on the --http address; '' for off",
        "",
        metavar="PREFIX",
    ),
    Flag(
        (sa.DAPR_STORE,),
        "with --api-locks, also serve Dapr's lock API (POST /v1.0-alpha1/lock|unlock/NAME) "
        "for the lock store NAME; '' for off",
        "redlease",
        metavar="NAME",
    ),
    Flag(
        (sa.API_TOKEN_FILE,),
        "a file holding the API token that the lock API and POST /drained require (as "
        "Authorization: Bearer or dapr-api-token); needed when they are served off loopback",
        "",
        metavar="PATH",
    ),
    Flag(
        (sa.HOLDERS,),
        "N active of M: up to N replicas lead at once, each holding one slot of a counting "
        "semaphore over the lock (1 to 64; with --lock-ref, spec.holders decides)",
        1,
        flags.count,
        metavar="N",
    ),
    Flag(
        (sa.DRAIN_TIMEOUT,),
        "on SIGTERM or a hand-off, publish leader: false, draining: true and keep the lease "
        "until the app calls POST /drained, at most DURATION (ends early, released, if the "
        "renewals stop succeeding); 0 for off",
        0.0,
        parse_duration,
        metavar="DURATION",
    ),
)
KUBE = (
    Flag((sa.POD_LABEL,), "label own pod redlease.dev/leader", kind="switch"),
    Flag(
        (sa.LEASE_MIRROR,),
        "while leading, keep a coordination.k8s.io Lease named after the lock",
        kind="switch",
    ),
    Flag((sa.EVENTS,), "post became/stopped-leading Events", kind="switch"),
    Flag(
        (sa.APP_STOPS_FIRST,),
        "the app is stopped before this sidecar gets SIGTERM (a native sidecar): SIGTERM "
        "releases at once, without a drain; a planned hand-off still drains",
        kind="switch",
    ),
)


def sidecar_config(
    args: argparse.Namespace, pod: Pod, login: ClusterAuth | None = None
) -> SidecarConfig:
    """The sidecar's configuration from its parsed flags, its pod and its API login."""
    from redlease.sidecar import config as sc
    from redlease.sidecar.apiauth import check_exposure, read_token
    from redlease.sidecar.dapr import validate_store
    from redlease.sidecar.lockanswers import validate_prefix

    ref = flags.lock_ref(args, pod.namespace)
    election = None
    if ref is None:
        election = flags.election_config(args)
        holders = sc.check_holders(args.holders, election.keys, sa.HOLDERS)
        election = dataclasses.replace(election, holders=holders)
    else:  # the DistributedLock's spec.holders decides; the flag is checked all the same
        sc.check_holders(args.holders, (), sa.HOLDERS)
    config = sc.SidecarConfig(
        identity=flags.identity(args),
        election=election,
        http=sc.parse_http(args.http),
        metrics=sc.parse_http(args.metrics, sa.METRICS),
        probes=sc.parse_http(args.probes, sa.PROBES),
        state_dir=Path(args.state_dir) if args.state_dir else None,
        ready=args.ready,
        pod_label=args.pod_label,
        lock_ref=ref,
        kube=login,
        pod_name=pod.name,
        namespace=pod.namespace,
        lease_mirror=args.lease_mirror,
        events=args.events,
        api_locks=validate_prefix(args.api_locks, sa.API_LOCKS),
        dapr_store=validate_store(args.dapr_store, sa.DAPR_STORE),
        api_token=read_token(args.api_token_file) if args.api_token_file else None,
        drain_timeout=args.drain_timeout,
        app_stops_first=args.app_stops_first,
    )
    guarded = {sa.API_LOCKS: config.api_locks is not None,
               sa.DRAIN_TIMEOUT: config.drain_timeout > 0}  # fmt: skip
    check_exposure(config.http.host if config.http else None, guarded, config.api_token)
    if election is not None:
        config.check_election(election, sa.HOLDERS)
    return config


def main(args: argparse.Namespace) -> int:
    from redlease.cli import logs

    pod = this_pod()
    config = sidecar_config(args, pod, sidecar_login(args.kube_api, pod, flags.identity(args)))
    logs.configure(args.log_level, args.log_format)
    from redlease.sidecar.daemon import run_sidecar

    return run_sidecar(config)


COMMAND = Command(
    name=sa.COMMAND,
    summary="hold a lease next to an application container",
    description="Hold a lease next to an application container and say whether this pod "
    "leads: on HTTP (/status, /readyz), in a state file, optionally in a pod label.",
    example="redlease sidecar --lock orders --redis redis://redis:6379/0 --pod-label",
    flags=(*flags.CONNECTION, *flags.ELECTION, *OWN, *flags.LOCK_REF, *KUBE, *flags.LOG),
    run=main,
    credentials=True,
)
