"""`redlease inject` and the injection flags it shares with `redlease operator`.

``redlease inject -f FILE|-`` prints the manifests with the sidecar injected into every pod (or
pod template: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, List) that asks for
it, using :mod:`redlease.operator.injection` -- the code the admission webhook runs. For GitOps
without webhooks, and to see what the webhook would do. DistributedLocks in the input are used
as the webhook uses the cluster's (credentials); a lock that is not in the input is "not found".
A Secret in the input gets the webhook's consent check; one that is not is not checked.
Warnings go to stderr; a denial prints one line naming the annotation and exits 2 with no output.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redlease.cli.command import Command, Flag
from redlease.cli.flags import host_port
from redlease.errors import ConfigError
from redlease.kube.names import API_VERSION, KIND
from redlease.operator import injection

if TYPE_CHECKING:
    from redlease.operator.webhook import WebhookConfig

# Kinds whose pods come from ``spec.template``; CronJob nests it one level deeper.
TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


# What to inject (the chart's ``injection.*`` values map onto these).
INJECTION = (
    Flag(("--sidecar-image",), "image of the injected sidecar", injection.DEFAULT_IMAGE),
    Flag(
        ("--sidecar-pull-policy",),
        "the injected container's imagePullPolicy",
        "IfNotPresent",
        choices=injection.PULL_POLICIES,
    ),
    Flag(
        ("--sidecar-mode",),
        "native: init container with restartPolicy Always (1.29+); container: plain",
        "native",
        choices=injection.SIDECAR_MODES,
    ),
    Flag(
        ("--sidecar-resources",),
        'resources of the sidecar, e.g. {"requests": {"cpu": "10m"}} (default: '
        + json.dumps(injection.DEFAULT_RESOURCES)
        + ")",
        metavar="JSON",
    ),
    Flag(
        ("--require-lock",),
        "deny pods whose DistributedLock does not exist (default: warn)",
        kind="switch",
    ),
)

# `redlease operator`: serve the injection webhook.
WEBHOOK = (
    Flag(
        ("--webhook",),
        "serve the sidecar-injection webhook over HTTPS, e.g. 0.0.0.0:9443 (default: off)",
        metavar="HOST:PORT",
    ),
    Flag(("--webhook-cert",), "the webhook's certificate (chain)", metavar="PEM"),
    Flag(("--webhook-key",), "the webhook's private key", metavar="PEM"),
    Flag(
        ("--webhook-failure-policy",),
        "as in the MutatingWebhookConfiguration: what an internal error does",
        "Ignore",
        choices=("Ignore", "Fail"),
    ),
    *INJECTION,
)


def _resources(raw: str | None) -> dict[str, Any]:
    if raw is None or not raw.strip():
        return copy.deepcopy(dict(injection.DEFAULT_RESOURCES))
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ConfigError("--sidecar-resources", f"not JSON: {exc}") from None
    if not isinstance(value, dict) or not set(value) <= {"requests", "limits", "claims"}:
        raise ConfigError("--sidecar-resources", "must be an object with requests and/or limits")
    return value


def inject_config(args: argparse.Namespace) -> injection.InjectConfig:
    image = str(args.sidecar_image or "").strip()
    if not image or any(c.isspace() for c in image):
        raise ConfigError("--sidecar-image", f"not an image reference: {args.sidecar_image!r}")
    return injection.InjectConfig(
        image=image,
        pull_policy=args.sidecar_pull_policy,
        native=args.sidecar_mode == "native",
        require_lock=bool(args.require_lock),
        resources=_resources(args.sidecar_resources),
    )


def webhook_config(args: argparse.Namespace) -> WebhookConfig | None:
    """The webhook settings, or None without ``--webhook``."""
    inject_settings = inject_config(args)  # checked even without --webhook: a bad flag is bad
    if not args.webhook:
        return None
    from redlease.operator.webhook import WebhookConfig

    host, port = host_port(args.webhook, "--webhook")
    cert, key = args.webhook_cert, args.webhook_key
    for flag, path in (("--webhook-cert", cert), ("--webhook-key", key)):
        if not path:
            raise ConfigError(flag, "is required with --webhook (the API server needs HTTPS)")
        if not Path(path).is_file():
            raise ConfigError(flag, f"no such file: {path}")
    return WebhookConfig(
        host=host,
        port=port,
        certfile=cert,
        keyfile=key,
        failure_policy=args.webhook_failure_policy,
        inject=inject_settings,
    )


def _read(sources: list[str]) -> list[Any]:
    import yaml  # type: ignore[import-untyped]

    docs: list[Any] = []
    for source in sources:
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
        except OSError as exc:
            raise ConfigError("--filename", f"{source}: {exc.strerror or exc}") from None
        try:
            docs += [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:
            raise ConfigError("--filename", f"{source}: not YAML/JSON: {exc}") from None
    return docs


def _flatten(docs: list[Any]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            yield from _flatten(doc.get("items") or [])
        elif isinstance(doc, dict):
            yield doc


def pod_templates(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod (or pod templates) of a manifest, as mutable parts of ``doc``."""
    kind = doc.get("kind")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return
    if kind == "Pod":
        yield doc
    elif kind in TEMPLATE_KINDS and isinstance(spec.get("template"), dict):
        yield spec["template"]
    elif kind == "CronJob":
        job = spec.get("jobTemplate") or {}
        template = (job.get("spec") or {}).get("template")
        if isinstance(template, dict):
            yield template


def inject_documents(
    docs: list[Any], config: injection.InjectConfig, namespace: str | None = None
) -> tuple[list[str], list[str]]:
    """Inject into every pod template of ``docs`` in place; returns (warnings, denials)."""
    objects = list(_flatten(docs))

    def by_name(kind: str, api_version: str) -> dict[tuple[str, str], dict[str, Any]]:
        return {
            (str(meta.get("namespace") or namespace or "default"), str(meta.get("name"))): d
            for d in objects
            if d.get("kind") == kind and d.get("apiVersion") == api_version
            for meta in [d.get("metadata") or {}]
        }

    locks = by_name(KIND, API_VERSION)
    secrets = by_name("Secret", "v1")
    warnings: list[str] = []
    denials: list[str] = []
    for doc in objects:
        meta = doc.get("metadata") or {}
        ns = str(meta.get("namespace") or namespace or "default")
        where = f"{doc.get('kind')}/{meta.get('name') or meta.get('generateName') or '?'}"
        if doc.get("kind") != "Pod":
            warnings += [f"{where}: {w}" for w in _misplaced(meta)]
        for pod in pod_templates(doc):
            try:
                options = injection.read_options(pod)
                if options is None:
                    warnings += [f"{where}: {w}" for w in injection.annotation_warnings(pod)]
                    continue
                found = locks.get((ns, options.lock))
                lookup = injection.LockLookup(obj=found) if found else injection.NOT_FOUND
                given = {n: secrets[ns, n] for n in lookup.secret_names() if (ns, n) in secrets}
                lookup = lookup.with_secrets(given)
                result = injection.plan(pod, ns, options, lookup, config)
            except ConfigError as exc:
                denials.append(f"{where}: {exc}")
                continue
            pod.clear()
            pod.update(result.pod)
            warnings += [f"{where}: {w}" for w in result.warnings]
    return warnings, denials


def _misplaced(meta: Any) -> list[str]:
    """A warning when a workload's own metadata carries ``redlease.dev/lock``: only the pod
    template's annotations reach the pods (and the webhook)."""
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or injection.LOCK_ANNOTATION not in annotations:
        return []
    return [
        f"metadata.annotations: {injection.LOCK_ANNOTATION} here is not read: put it in the pod "
        "template's metadata.annotations"
    ]


def main(args: argparse.Namespace) -> int:
    from redlease.cli.validate import problems

    config = inject_config(args)
    sources = args.filename or ["-"]
    docs = _read(sources)
    invalid = [str(p) for p in problems(", ".join(sources), docs)[0]]
    for line in invalid:  # every error of every DistributedLock given, at once
        sys.stderr.write(f"redlease: error: {line}\n")
    if invalid:
        return 2
    warnings, denials = inject_documents(docs, config, args.namespace)
    for line in warnings:
        sys.stderr.write(f"redlease inject: warning: {line}\n")
    if denials:
        for line in denials:
            sys.stderr.write(f"redlease: error: {line}\n")
        return 2
    sys.stdout.write(dump_documents(docs))
    return 0


def dump_documents(docs: list[Any]) -> str:
    """Compact YAML (:mod:`redlease.cli.yamlout`): what fits on a line in flow style."""
    from redlease.cli.yamlout import dump_all

    return dump_all(docs)


COMMAND = Command(
    name="inject",
    summary="print manifests with the redlease sidecar injected (as the webhook does)",
    description="Print manifests with the redlease sidecar injected into every pod template, "
    "as the webhook would (GitOps). Reports every error at once.",
    example="redlease inject -f deploy.yaml -f lock.yaml > injected.yaml",
    flags=(
        Flag(
            ("-f", "--filename"),
            "YAML or JSON manifests; '-' for stdin (repeatable; default: stdin)",
            kind="list",
            metavar="FILE",
        ),
        Flag(("-n", "--namespace"), "namespace of objects that name none (default: default)"),
        *INJECTION,
    ),
    run=main,
)
