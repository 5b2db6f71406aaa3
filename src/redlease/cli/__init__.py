"""The `redlease` command: the only place that reads argv and ``REDLEASE_*`` env vars.

Each subcommand registers its flags here and hands validated settings to its package.
User mistakes end with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from redlease import __version__
from redlease.cli import inject as inject_cli
from redlease.cli.durations import parse_duration, positive_duration
from redlease.cli.undumpable import make_undumpable
from redlease.core.primitives import DEFAULT_REPLICA_TIMEOUT
from redlease.core.timing import TTL_RANGE
from redlease.errors import ConfigError, RedleaseError
from redlease.kube import sidecar_args as sa
from redlease.kube.spec import DEFAULT_READY, READY_MODES

if TYPE_CHECKING:
    from redlease.operator import OperatorConfig


class _Help(argparse.RawDescriptionHelpFormatter):
    """Help with every flag's default and the env var it reads (the examples keep their lines)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or action.dest in ("help", "version"):
            return text
        default = getattr(action, "real_default", action.default)
        shown = default not in (None, False, _UNSET, argparse.SUPPRESS, [])
        if shown and "default" not in text:
            value = f"{default:g}" if isinstance(default, float) else default
            text += f" (default: {'off' if value == '' else value})"
        return f"{text} [env {_env_name(action)}]".lstrip()


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the flag (exit 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"redlease: error: {message}\n")
        raise SystemExit(2)


# Each subcommand's description and example (its flags say the rest, with their defaults).
_ABOUT = {
    "demo": (
        "Leader election on your machine: a local redis-server, sidecars contending for one "
        "lock, a live table of the leader, a SIGTERM and a SIGKILL failover measured.",
        "redlease demo --contenders 3",
    ),
    "operator": (
        "Run the DistributedLock operator (kopf): reads every lock's state from Redis into the "
        "object's status, posts Events, serves the sidecar-injection webhook. Needs a "
        "Kubernetes API (in-cluster, or a kubeconfig) and the 'operator' extra.",
        "redlease operator --namespace apps --metrics 0.0.0.0:9090",
    ),
    "sidecar": (
        "Hold a lease next to an application container and say whether this pod leads: on "
        "HTTP (/status, /readyz), in a state file, optionally in a pod label.",
        "redlease sidecar --lock orders --redis redis://redis:6379/0 --pod-label",
    ),
    "run": (
        "Run COMMAND only while holding the lease; stop it (SIGTERM, then SIGKILL) when the "
        "lease is lost. Exit status: COMMAND's; 75 when --try or --timeout gave up (COMMAND "
        "not run); 76 when the lease was lost while COMMAND ran; 127 / 126 when COMMAND is not "
        "found / not executable (checked before the lease is taken).",
        "redlease run --lock nightly --redis redis://redis:6379/0 --try -- ./export.sh",
    ),
    "status": (
        "One read of a lock: holder, fencing token, TTL left, nodes healthy. Exit 1 when "
        "Redis cannot be read.",
        "redlease status --lock orders --redis redis://redis:6379/0 --json",
    ),
    "retire": (
        "Delete the keys of a lock nobody uses any more (its fence counter too). Refused "
        "while the lock is held or a node does not answer.",
        "redlease retire --lock old-job --redis redis://redis:6379/0 --yes",
    ),
    "wait": (
        "Block until this pod's sidecar leads (its state file or /status says so and "
        "leader_until is ahead). Exit 0 once leader, 1 on --timeout.",
        "redlease wait --state-dir /var/run/redlease --lock orders && exec ./app",
    ),
    "validate": (
        "Check DistributedLock manifests offline with the rules of the CRD schema, its CEL "
        "rules and the operator; lists every error at once (file: object: field: why). "
        "Exit 1 when there is one.",
        "redlease validate -f examples/redlock-distributedlock.yaml",
    ),
    "inject": (
        "Print manifests with the redlease sidecar injected into every pod template, as the "
        "webhook would (GitOps). Reports every error at once.",
        "redlease inject -f deploy.yaml -f lock.yaml > injected.yaml",
    ),
}


def _describe(sub: Any) -> None:
    for name, parser in sub.choices.items():
        description, example = _ABOUT[name]
        parser.description = textwrap.fill(description, 88)
        parser.epilog = f"example:\n  {example}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="redlease", description="Leader election and locks on Redis.")
    parser.add_argument("--version", action="version", version=f"redlease {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="contenders taking turns on a local redis-server")
    demo.add_argument(
        "--contenders",
        type=_contenders,
        default=3,
        help="sidecars contending for the lock, 3 to 10 (two leaders are stopped in turn)",
    )
    demo.add_argument("--rounds", type=int, default=1, help="ignored (kept for old scripts)")
    _add_operator(sub)
    _add_election_commands(sub)
    _defer_defaults(inject_cli.add_command(sub))
    check = sub.add_parser("validate", help="check DistributedLock manifests offline")
    check.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="FILE",
        required=True,
        help="YAML or JSON manifests; '-' for stdin (repeatable)",
    )
    _describe(sub)
    return parser


# the commands that hold Redis credentials or the operator's Secrets for their whole run
_CREDENTIAL_COMMANDS = ("operator", "sidecar", "run", "status", "retire")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in _CREDENTIAL_COMMANDS:
        make_undumpable()
    try:
        if args.command == "demo":
            from redlease.cli.demo import run_demo

            return run_demo(contenders=args.contenders, rounds=args.rounds)
        if args.command == "operator":
            from redlease.operator.runner import run_operator

            config = _operator_config(args, parser)
            election = config.election
            kube = _operator_kube(election.identity if election else None)
            return run_operator(dataclasses.replace(config, kube=kube))
        if args.command == "validate":
            from redlease.cli import validate

            return validate.run(args.filename)
        if args.command == "inject":
            _fill_from_env(parser, args)
            return inject_cli.run(args)
        if args.command in _ELECTION_COMMANDS:
            return _run_election_command(parser, args)
        parser.error(f"unknown command {args.command!r}")
    except ConfigError as exc:
        sys.stderr.write(f"redlease: error: {exc}\n")
        return 2
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        sys.stderr.write(
            f"redlease: error: redlease {args.command} needs the {extra!r} extra "
            f"({exc.name} is not installed): pip install 'redlease[{extra}]'\n"
        )
        return 2
    except RedleaseError as exc:
        sys.stderr.write(f"redlease: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


# optional dependencies -> the extra that installs them (pyproject.toml)
_EXTRAS = {
    "kopf": "operator",
    "yaml": "operator",
    "jsonpatch": "operator",
    "aiohttp": "sidecar",
    "prometheus_client": "sidecar",
}


def _add_operator(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``redlease operator``: flags mapped onto kopf's run options (see docs/operator.md)."""
    op = sub.add_parser("operator", help="run the DistributedLock operator (kopf)")
    scope = op.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=None,
        help="watch this namespace (repeatable; glob patterns allowed); env REDLEASE_NAMESPACE",
    )
    scope.add_argument(
        "--all-namespaces", "-A", action="store_true", default=None, help="watch every namespace"
    )
    op.add_argument(
        "--liveness",
        help="liveness endpoint URL, e.g. http://0.0.0.0:8080/healthz (default: none)",
    )
    op.add_argument("--refresh", default="5", metavar="DURATION", help="time between reads")
    op.add_argument("--concurrency", default="16", help="nodes read at once")
    op.add_argument("--node-timeout", default="3", metavar="DURATION", help="time per node")
    op.add_argument(
        "--metrics",
        help="serve Prometheus /metrics on HOST:PORT, e.g. 127.0.0.1:9090 (default: off)",
    )
    op.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    op.add_argument(
        "--leader-election",
        action="store_true",
        help="run several replicas: one active (holds a coordination.k8s.io Lease), the others "
        "standing by and serving the webhook",
    )
    op.add_argument("--lease-name", default="redlease-operator", help="the operator's Lease")
    op.add_argument(
        "--lease-namespace", help="namespace of the Lease (default: $POD_NAMESPACE, in-cluster)"
    )
    op.add_argument("--lease-duration", default="15", metavar="DURATION", help="Lease duration")
    op.add_argument(
        "--lease-renew-deadline",
        metavar="DURATION",
        help="stop leading after (default: 2/3 of the duration)",
    )
    op.add_argument(
        "--lease-retry-period",
        metavar="DURATION",
        help="renew / retry every (default: 2/15 of the duration)",
    )
    op.add_argument(
        "--identity", help="this replica's identity (default: $POD_NAME, else hostname:pid)"
    )
    inject_cli.add_webhook_flags(op)
    _defer_defaults(op)  # every flag also reads REDLEASE_<FLAG> (see _fill_from_env)


def _number(value: str | None, flag: str, lo: float, hi: float, *, duration: bool = False) -> float:
    try:
        number = parse_duration(value or "") if duration else float(value or "")
    except ValueError:
        kind = "a duration (15, 0.5, 15s, 1m30s, 500ms)" if duration else "a number"
        raise ConfigError(flag, f"not {kind}: {value!r}") from None
    if not lo <= number <= hi:
        raise ConfigError(flag, f"must be between {lo:g} and {hi:g}, got {number:g}")
    return number


def _operator_config(
    args: argparse.Namespace, parser: argparse.ArgumentParser | None = None
) -> OperatorConfig:
    from urllib.parse import urlsplit

    from redlease.operator import OperatorConfig

    if args.all_namespaces is True:  # given on the command line: env namespaces don't apply
        args.namespace = []
    _fill_from_env(parser or build_parser(), args)

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
        metrics=_host_port(args.metrics, "--metrics") if args.metrics else None,
        webhook=inject_cli.webhook_config(args, _host_port),
        election=_operator_election(args) if args.leader_election else None,
    )


def _in_cluster_api() -> str | None:
    """The API server a pod reaches (KUBERNETES_SERVICE_HOST/PORT), None outside a cluster."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def _operator_kube(identity: str | None) -> Any:
    """The operator's Kubernetes login (in-cluster, else the kubeconfig's current context),
    read before kopf starts: kopf itself retries a missing login for ever."""
    from pathlib import Path

    from redlease.kube import kubeconfig

    api = _in_cluster_api()
    if api and os.path.exists(os.path.join(SA_DIR, "token")):
        auth = kubeconfig.in_cluster(api, Path(SA_DIR))
    else:
        paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        paths = paths or [os.path.expanduser("~/.kube/config")]
        found = [Path(p) for p in paths if os.path.isfile(p)]
        if not found:
            _no_kube_api(paths)
        auth = kubeconfig.from_kubeconfig(found)
    return dataclasses.replace(auth, identity=identity) if identity else auth


def _no_kube_api(paths: list[str]) -> NoReturn:
    raise ConfigError(
        "KUBECONFIG",
        "no Kubernetes API: not in a pod (no KUBERNETES_SERVICE_HOST and service account token) "
        f"and no kubeconfig at {os.pathsep.join(paths)}",
    )


def _operator_election(args: argparse.Namespace) -> Any:
    """The operator's Lease: name, namespace, identity and client-go's timing rules."""
    from redlease.core.handles import default_identity
    from redlease.core.keys import validate_identity
    from redlease.core.timing import validate_timing
    from redlease.kube.spec import validate_object_name
    from redlease.operator.leadership import ElectionConfig

    namespace = args.lease_namespace or os.environ.get("POD_NAMESPACE")
    ns_file = os.path.join(SA_DIR, "namespace")
    if not namespace and os.path.exists(ns_file):
        with open(ns_file) as fh:
            namespace = fh.read().strip()
    if not namespace:
        raise ConfigError("--lease-namespace", "needed outside a pod (or set POD_NAMESPACE)")
    identity = args.identity or default_identity()  # unique per process
    names = ("--lease-duration", "--lease-renew-deadline", "--lease-retry-period")
    given = (args.lease_duration, args.lease_renew_deadline, args.lease_retry_period)
    ttl, deadline, retry = (
        _number(value, flag, *TTL_RANGE, duration=True) if value else None
        for value, flag in zip(given, names, strict=True)
    )
    timing = validate_timing(ttl or 15.0, deadline, retry, names=names)
    return ElectionConfig(
        namespace=validate_object_name(namespace, "--lease-namespace"),
        name=validate_object_name(args.lease_name, "--lease-name"),
        identity=validate_identity(identity, "--identity"),
        timing=timing,
    )


def _host_port(value: str, flag: str) -> tuple[str, int]:
    from redlease.core.connect import digits

    host, sep, port = value.rpartition(":")
    number = digits(port)
    if not sep or not host or number is None or not 0 < number < 65536:
        raise ConfigError(flag, f"use HOST:PORT, got {value!r}")
    return host, number


# --- sidecar, run, status, wait (issue 4) --------------------------------------------------------
# Every flag of these commands also reads REDLEASE_<FLAG> (``--renew-deadline`` ->
# ``REDLEASE_RENEW_DEADLINE``); the command line wins over the environment.

_ELECTION_COMMANDS = ("sidecar", "run", "status", "wait", "retire")
_UNSET: Any = object()
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
SA_DIR = sa.SERVICE_ACCOUNT_DIR


def _contenders(value: str) -> int:
    from redlease.core.connect import digits

    number = digits(value)
    if number is None:
        raise ValueError(value)
    if not 3 <= number <= 10:
        raise ValueError(value)
    return number


_contenders.__name__ = "number of contenders (3 to 10)"


def _count(value: str) -> int:
    from redlease.core.connect import digits

    number = digits(value)
    if number is None:
        raise ValueError(value)
    if number < 0:
        raise ValueError(value)
    return number


_count.__name__ = "count (integer >= 0)"


def _add_connection_flags(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--lock", help="lock name (Redis key {NAME})")
    p.add_argument(
        "--redis",
        action="append",
        metavar="URL",
        help="redis://, rediss://, unix:// or redis+sentinel://h1:p1,h2:p2/service URL; "
        "repeat for a RedLock set of 3 or more (env: comma-separated)",
    )
    p.add_argument("--cluster", action="store_true", help="the URL is a Redis Cluster seed")
    p.add_argument("--quorum", type=int, help="nodes that must agree (default: majority)")
    p.add_argument("--username", help="Redis ACL user")
    p.add_argument("--password", help="Redis password (prefer REDLEASE_PASSWORD)")
    p.add_argument(sa.TLS_CA_FILE_FLAG, metavar="PEM", help="CA bundle to verify rediss:// nodes")
    p.add_argument(sa.TLS_CERT_FILE_FLAG, metavar="PEM", help="client certificate (mTLS)")
    p.add_argument(sa.TLS_KEY_FILE_FLAG, metavar="PEM", help="client certificate's key (mTLS)")
    p.add_argument(
        "--tls-insecure-skip-verify", action="store_true", help="no certificate check (testing)"
    )


def _add_timing_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ttl", type=positive_duration, default=15.0, metavar="DURATION", help="lease duration"
    )
    p.add_argument(
        "--renew-deadline",
        type=positive_duration,
        metavar="DURATION",
        help="step down after (default: 2/3 of --ttl)",
    )
    p.add_argument(
        "--retry-period",
        type=positive_duration,
        metavar="DURATION",
        help="retry/renew every (default: 2/15 of --ttl)",
    )
    p.add_argument("--identity", help="candidate identity (default: $POD_NAME, else hostname:pid)")
    p.add_argument("--paused", action="store_true", help="make no new acquisitions")
    p.add_argument("--preferred-holder", metavar="ID", help="planned hand-off to ID")
    p.add_argument(
        "--replicas",
        type=_count,
        default=0,
        help="WAIT for N replicas after every grant and renewal; fail closed if fewer",
    )
    p.add_argument(
        "--replica-timeout",
        type=positive_duration,
        default=DEFAULT_REPLICA_TIMEOUT,
        metavar="DURATION",
        help="how long WAIT may take",
    )


def _add_lock_ref_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        sa.LOCK_REF,
        metavar="[NS/]NAME",
        help="keys, nodes, timing and credentials from a DistributedLock (followed live)",
    )
    p.add_argument(
        sa.PINNED_NODE,
        action="append",
        metavar="URL",
        help="with --lock-ref: use only these node URLs (repeat per node; the injector pins "
        "the nodes whose consent it checked)",
    )
    p.add_argument(
        sa.ALLOWED_MASTER,
        action="append",
        metavar="URL",
        help="with --lock-ref and given credentials: the only masters (redis://HOST:PORT) a "
        "Sentinel may name (repeat; the injector writes those the lock's Secret allows)",
    )
    p.add_argument("--kube-api", metavar="URL", help="Kubernetes API (default: in-cluster)")


def _add_log_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="least severe level logged",
    )
    p.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="auto: console on a terminal, JSON lines otherwise",
    )


def _add_sidecar(sub: Any) -> argparse.ArgumentParser:
    """``redlease sidecar``: its flags and defaults are :mod:`redlease.kube.sidecar_args`'s, the
    ones the injector writes."""
    side: argparse.ArgumentParser = sub.add_parser(
        sa.COMMAND, help="hold a lease next to an application container"
    )
    _add_connection_flags(side)
    _add_timing_flags(side)
    side.add_argument(sa.HTTP, default=sa.DEFAULT_HTTP, help="HOST:PORT, or 'off'")
    side.add_argument(
        sa.METRICS,
        default=sa.DEFAULT_METRICS,
        help="also serve /metrics alone on HOST:PORT (for scrapers)",
    )
    side.add_argument(
        sa.STATE_DIR_FLAG, default=sa.STATE_DIR, help="state file directory; '' for none"
    )
    side.add_argument(
        sa.READY,
        choices=READY_MODES,
        default=DEFAULT_READY,
        help="/readyz: 'connected' (default: up and reaching a quorum of nodes), 'leader', "
        "'always'",
    )
    _add_lock_ref_flags(side)
    side.add_argument(sa.POD_LABEL, action="store_true", help="label own pod redlease.dev/leader")
    side.add_argument(
        sa.LEASE_MIRROR,
        action="store_true",
        help="while leading, keep a coordination.k8s.io Lease named after the lock",
    )
    side.add_argument(sa.EVENTS, action="store_true", help="post became/stopped-leading Events")
    _add_log_flags(side)
    return side


def _add_run(sub: Any) -> argparse.ArgumentParser:
    run: argparse.ArgumentParser = sub.add_parser(
        "run", help="run COMMAND only while holding the lease"
    )
    _add_connection_flags(run)
    _add_timing_flags(run)
    _add_lock_ref_flags(run)
    run.add_argument(
        "--grace",
        type=positive_duration,
        metavar="DURATION",
        help="SIGTERM to SIGKILL (default: half the gap between renew deadline and TTL)",
    )
    give_up = run.add_mutually_exclusive_group()
    give_up.add_argument(
        "--timeout",
        type=positive_duration,
        metavar="DURATION",
        help="give up after waiting this long for the lease: exit 75, COMMAND not run "
        "(default: wait on)",
    )
    give_up.add_argument(
        "--try",
        dest="try_once",
        action="store_true",
        help="skip at once if the lease is held: exit 75, COMMAND not run (flock -n)",
    )
    run.add_argument(
        "--keep-credentials-env",
        action="store_true",
        help="pass REDLEASE_PASSWORD/USERNAME/REDIS on to COMMAND (default: removed)",
    )
    _add_log_flags(run)
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ARGS")
    return run


def _add_election_commands(sub: Any) -> None:
    side, run = _add_sidecar(sub), _add_run(sub)
    status = sub.add_parser("status", help="holder, fencing token, TTL left, nodes healthy")
    _add_connection_flags(status)
    status.add_argument("--json", action="store_true", help="print JSON")

    retire = sub.add_parser("retire", help="delete the keys of a lock nobody uses any more")
    _add_connection_flags(retire)
    retire.add_argument("--yes", action="store_true", help="yes, its fence counter goes too")

    wait = sub.add_parser("wait", help="block until this pod's sidecar leads")
    wait.add_argument("--state-file", metavar="PATH", help="the sidecar's <lock>.json")
    wait.add_argument("--state-dir", metavar="DIR", help="with --lock: DIR/<lock>.json")
    wait.add_argument("--lock", help="with --state-dir: the lock whose DIR/<lock>.json to read")
    wait.add_argument(sa.HTTP, metavar="URL", help=f"the sidecar's address, e.g. {sa.DEFAULT_HTTP}")
    wait.add_argument(
        "--timeout",
        type=positive_duration,
        metavar="DURATION",
        help="give up after (default: never)",
    )
    wait.add_argument(
        "--interval", type=positive_duration, default=0.2, metavar="DURATION", help="poll period"
    )
    for p in (side, run, status, retire, wait):
        _defer_defaults(p)


def _defer_defaults(p: argparse.ArgumentParser) -> None:
    """Mark every flag unset so that env vars can fill the ones the command line did not."""
    for action in p._actions:
        if action.option_strings and action.dest != "help":
            action.real_default = action.default  # type: ignore[attr-defined]
            # append actions need a list-or-None default; None means "not on the command line"
            action.default = None if isinstance(action, argparse._AppendAction) else _UNSET


def _env_name(action: argparse.Action) -> str:
    return sa.env_name(max(action.option_strings, key=len))


def _fill_from_env(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    subparsers: Any = parser._subparsers
    sub = subparsers._group_actions[0].choices[args.command]
    for action in sub._actions:
        if not action.option_strings or action.dest == "help":
            continue
        given = getattr(args, action.dest, None)
        appended = isinstance(action, argparse._AppendAction)
        if given is not _UNSET and not (given is None and appended):
            continue
        name = _env_name(action)
        flag = max(action.option_strings, key=len)
        raw = os.environ.get(name)
        value = action.real_default
        if raw is not None:
            try:
                value = _convert(action, raw)
            except (TypeError, ValueError):
                kind = getattr(action.type, "__name__", "value")
                sub.error(f"{name} (for {flag}): invalid {kind}: {raw!r}")
            if action.choices is not None and value not in action.choices:
                options = ", ".join(map(str, action.choices))
                sub.error(f"{name} (for {flag}): {raw!r} is not one of {options}")
        setattr(args, action.dest, value)


def _convert(action: argparse.Action, raw: str) -> Any:
    if isinstance(action, argparse._StoreTrueAction):
        if raw.strip().lower() in _TRUE:
            return True
        if raw.strip().lower() in _FALSE:
            return False
        raise ValueError(raw)
    if isinstance(action, argparse._AppendAction):
        return [part for part in re.split(r"[,\s]+", raw) if part]
    return action.type(raw) if callable(action.type) else raw


def _kube_settings(api: str | None) -> Any:
    from pathlib import Path

    from redlease.kube.client import KubeSettings, check_api_url

    namespace = os.environ.get("POD_NAMESPACE")
    ns_file = Path(SA_DIR, "namespace")
    if not namespace and ns_file.exists():
        namespace = ns_file.read_text().strip()
    api = api or _in_cluster_api()
    if api:
        check_api_url(api)
    return KubeSettings(
        api=api or None,
        token_file=Path(SA_DIR, "token"),
        ca_file=Path(SA_DIR, "ca.crt"),
        pod_name=os.environ.get("POD_NAME") or None,
        namespace=namespace or None,
    )


def _identity(args: argparse.Namespace) -> str:
    """``--identity``, else the library's default ($POD_NAME, else ``hostname:pid``: unique per
    process, so two commands on one host never share one)."""
    from redlease.core.handles import default_identity
    from redlease.core.keys import validate_identity

    return validate_identity(args.identity or default_identity(), "--identity")


def _tls(args: argparse.Namespace) -> Any:
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


def _target(args: argparse.Namespace) -> Any:
    """The node set from ``--redis``/``--cluster``/``--quorum``, credential and TLS flags."""
    from redlease.core.connect import Tls, validate_target

    if not args.redis:
        raise ConfigError("--redis", "at least one URL is required (or REDLEASE_REDIS)")
    return validate_target(
        args.redis,
        cluster=args.cluster,
        quorum=args.quorum,
        username=args.username,
        password=args.password,
        tls=_tls(args) or Tls(),
    )


def _lock_keys(args: argparse.Namespace) -> tuple[str, ...]:
    from redlease.core.keys import validate_name

    if not args.lock:
        raise ConfigError("--lock", "is required (or REDLEASE_LOCK)")
    return (validate_name(args.lock, "--lock"),)


def _election_config(args: argparse.Namespace) -> Any:
    from redlease.core.keys import validate_identity
    from redlease.core.timing import validate_timing
    from redlease.sidecar import config as sc

    return sc.ElectionConfig(
        keys=_lock_keys(args),
        identity=_identity(args),
        target=_target(args),
        timing=validate_timing(args.ttl, args.renew_deadline, args.retry_period),
        paused=args.paused,
        preferred_holder=(
            validate_identity(args.preferred_holder, "--preferred-holder")
            if args.preferred_holder
            else None
        ),
        **_replication(args),
    )


def _replication(args: argparse.Namespace) -> dict[str, Any]:
    """``--replicas``/``--replica-timeout`` checked by the library's own rule."""
    from redlease.core.primitives import validate_replication

    names = ("--replicas", "--replica-timeout")
    replicas, timeout = validate_replication(args.replicas, args.replica_timeout, names)
    return {"replicas": replicas, "replica_timeout": timeout}


def _lock_ref(args: argparse.Namespace, kube: Any) -> Any:
    """``--lock-ref`` (then ``--lock``/``--redis`` must not be given: the object says it all)."""
    from redlease.sidecar import config as sc

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
    from dataclasses import replace

    ref = replace(
        sc.parse_lock_ref(args.lock_ref, kube.namespace),
        replica_timeout=_replication(args)["replica_timeout"],
    )
    if args.pinned_node:
        from redlease.core.connect import validate_url

        pinned = [validate_url(u, sa.PINNED_NODE, credentials=False) for u in args.pinned_node]
        ref = replace(ref, pinned_nodes=frozenset(pinned))
    if args.allowed_master:
        from redlease.core.connect import Consent

        masters = Consent.parse(",".join(args.allowed_master), sa.ALLOWED_MASTER).masters()
        if len(masters) != len(set(args.allowed_master)):
            raise ConfigError(sa.ALLOWED_MASTER, "takes redis://HOST:PORT or rediss://HOST:PORT")
        ref = replace(ref, allowed_masters=frozenset(masters))
    tls = _tls(args)
    if tls is not None:  # given (injected pods: from the spec.tls Secrets as volumes)
        ref = replace(ref, tls=tls)
    if args.password:  # given (injected pods: from the Secret via env): the Secret is not read
        from redlease.kube.spec import Credentials

        ref = replace(ref, credentials=Credentials(args.username or None, args.password))
    return ref


def sidecar_config(args: argparse.Namespace, kube: Any) -> Any:
    """``redlease sidecar``'s configuration from its parsed flags and the pod's Kubernetes
    settings (a :class:`redlease.sidecar.config.SidecarConfig`)."""
    from pathlib import Path

    from redlease.sidecar import config as sc

    lock_ref = _lock_ref(args, kube)
    election = None if lock_ref is not None else _election_config(args)
    return sc.SidecarConfig(
        identity=_identity(args),
        election=election,
        http=sc.parse_http(args.http),
        metrics=sc.parse_http(args.metrics, sa.METRICS),
        state_dir=Path(args.state_dir) if args.state_dir else None,
        ready=args.ready,
        pod_label=args.pod_label,
        lock_ref=lock_ref,
        kube=kube,
        lease_mirror=args.lease_mirror,
        events=args.events,
    )


def _run_election_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    _fill_from_env(parser, args)
    if args.command == "status":
        from redlease.cli.status import show_status

        return show_status(_lock_keys(args), _target(args), as_json=args.json)
    if args.command == "retire":
        from redlease.cli.retire import retire_lock

        return retire_lock(_lock_keys(args)[0], _target(args), yes=args.yes)
    if args.command == "wait":
        from redlease.cli.wait import resolve_source, wait_for_leader

        source = resolve_source(args.state_file, args.state_dir, args.lock, args.http)
        return wait_for_leader(source, timeout=args.timeout, interval=args.interval)

    from redlease.cli import logs

    if args.command == "run":
        return _run(args)
    if args.command == "sidecar":
        config = sidecar_config(args, _kube_settings(args.kube_api))
        logs.configure(args.log_level, args.log_format)
        from redlease.sidecar.daemon import run_sidecar

        return run_sidecar(config)

    raise AssertionError(args.command)


def _run(args: argparse.Namespace) -> int:
    """``redlease run``: COMMAND is checked before anything connects (127 / 126, as `env`)."""
    from redlease.cli import logs
    from redlease.cli.run import RunConfig, command_problem, run_command

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("COMMAND", "give the command to run after --")
    problem = command_problem(tuple(cmd), os.environ.get("PATH"))
    if problem is not None:
        sys.stderr.write(f"redlease: error: COMMAND {problem[1]}\n")
        return problem[0]
    kube = _kube_settings(args.kube_api)
    lock_ref = _lock_ref(args, kube)
    election = None if lock_ref is not None else _election_config(args)
    logs.configure(args.log_level, args.log_format)
    return run_command(
        RunConfig(
            identity=_identity(args),
            election=election,
            command=tuple(cmd),
            grace=args.grace,
            lock_ref=lock_ref,
            kube=kube,
            keep_credentials=args.keep_credentials_env,
            wait=0.0 if args.try_once else args.timeout,
        )
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
