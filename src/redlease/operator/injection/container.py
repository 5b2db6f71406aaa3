"""The sidecar container and the volumes an injected pod gets, built from what the pod asks for
(:class:`~.annotations.Options`), the cluster's settings (:class:`InjectConfig`) and the lock's
parsed spec. Pure: dicts in the shape of the Kubernetes API.

The sidecar's command line comes from :class:`redlease.kube.sidecar_args.SidecarArgs`, the
declaration ``redlease sidecar``'s parser reads its flags and defaults from.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease import __version__
from redlease.kube import sidecar_args as sa
from redlease.kube.secretspec import SecretRef, TlsRefs
from redlease.operator.injection.annotations import Options

SIDECAR_NAME = "redlease"
STATE_VOLUME = "redlease-state"
KUBE_API_VOLUME = "redlease-kube-api-access"
TLS_CA_VOLUME = "redlease-tls-ca"
TLS_CLIENT_VOLUME = "redlease-tls-client"
VOLUMES = (STATE_VOLUME, KUBE_API_VOLUME, TLS_CA_VOLUME, TLS_CLIENT_VOLUME)
STATE_DIR = sa.STATE_DIR
TLS_DIR = sa.TLS_DIR
KUBE_API_DIR = sa.SERVICE_ACCOUNT_DIR  # where the sidecar's in-cluster config looks
METRICS_PORT_NAME = "redlease-metrics"  # the container port a PodMonitor selects
DEFAULT_IMAGE = f"ghcr.io/redlease/redlease:{__version__}"
DEFAULT_RESOURCES: Mapping[str, Any] = {
    "requests": {"cpu": "10m", "memory": "64Mi"},
    "limits": {"memory": "128Mi"},
}
TOKEN_SECONDS = 3600  # projected token lifetime; the kubelet refreshes it at 80 %
SIDECAR_USER = 10001  # the image's numeric user (Dockerfile: USER 10001:10001)
SIDECAR_MODES = ("native", "container")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
SECURITY_CONTEXT: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": SIDECAR_USER,
    "runAsGroup": SIDECAR_USER,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True, slots=True)
class InjectConfig:
    """Cluster-wide injection settings (operator flags / chart values ``injection.*``)."""

    image: str = DEFAULT_IMAGE
    pull_policy: str = "IfNotPresent"
    native: bool = True  # False: a plain container (clusters older than 1.29)
    require_lock: bool = False  # True: deny pods naming a DistributedLock that does not exist
    resources: Mapping[str, Any] = field(default_factory=lambda: copy.deepcopy(DEFAULT_RESOURCES))


def _probe(
    port: int, path: str, period: int, failures: int, timeout: int | None = None
) -> dict[str, Any]:
    """An httpGet probe of the sidecar's probe-only listener (``--probes`` on the pod IP,
    :func:`redlease.sidecar.probes.probes_app`): the kubelet probes the pod IP, which the
    loopback ``--http`` (the lock's state: nobody else's business) cannot answer. An httpGet
    costs the pod nothing per probe (an ``exec`` of ``redlease`` would start an interpreter
    and import the package, ~0.3 s of CPU, about every 3 s) and is four lines of YAML."""
    probe: dict[str, Any] = {"httpGet": {"path": path, "port": port}, "periodSeconds": period}
    if timeout is not None:
        probe["timeoutSeconds"] = timeout
    probe["failureThreshold"] = failures
    return probe


def _probes(options: Options) -> dict[str, Any]:
    # With --ready connected the app starts once the sidecar reaches a quorum of its nodes; a
    # leader-only /readyz would never let standbys start, so they wait for /healthz instead.
    startup_path = "/readyz" if options.ready == "connected" else "/healthz"
    return {
        "startupProbe": _probe(options.probe_port, startup_path, 2, 300),
        "readinessProbe": _probe(options.probe_port, "/readyz", 5, 2),
        # a failed liveness probe restarts the sidecar (a hand-off): 3 s, not the default 1 s
        "livenessProbe": _probe(options.probe_port, "/healthz", 10, 3, timeout=3),
    }


def tls_volumes(refs: TlsRefs) -> list[dict[str, Any]]:
    """The Secret volumes of ``spec.tls`` (the kubelet reads the Secrets, not the sidecar)."""
    volumes = []
    if refs.ca is not None:
        items = [{"key": refs.ca.key, "path": "ca.crt"}]
        volumes.append((TLS_CA_VOLUME, refs.ca.name, items))
    if refs.client is not None:
        items = [
            {"key": refs.client.cert_key, "path": "tls.crt"},
            {"key": refs.client.key_key, "path": "tls.key"},
        ]
        volumes.append((TLS_CLIENT_VOLUME, refs.client.name, items))
    # 0444: the sidecar runs as a non-root user; only the sidecar container mounts these
    return [
        {"name": name, "secret": {"secretName": secret, "items": items, "defaultMode": 0o444}}
        for name, secret, items in volumes
    ]


def _tls_mounts(refs: TlsRefs) -> list[dict[str, Any]]:
    """The CA at TLS_DIR/ca, the client pair at TLS_DIR/client (the paths the flags name)."""
    mounts = [(TLS_CA_VOLUME, sa.TLS_CA_SUBDIR)] if refs.ca is not None else []
    if refs.client is not None:
        mounts.append((TLS_CLIENT_VOLUME, sa.TLS_CLIENT_SUBDIR))
    return [
        {"name": name, "mountPath": f"{TLS_DIR}/{subdir}", "readOnly": True}
        for name, subdir in mounts
    ]


def _env(credentials: SecretRef | None) -> list[dict[str, Any]]:
    def field_ref(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}  # v1: the default

    def secret_ref(name: str, secret: str, key: str, optional: bool) -> dict[str, Any]:
        ref: dict[str, Any] = {"name": secret, "key": key}
        if optional:
            ref["optional"] = True
        return {"name": name, "valueFrom": {"secretKeyRef": ref}}

    env = [
        field_ref(sa.POD_NAME_ENV, "metadata.name"),
        field_ref(sa.POD_NAMESPACE_ENV, "metadata.namespace"),
    ]
    if credentials is not None:
        # Only the sidecar gets them, and it then never reads the Secret through the API.
        # optional: a Secret without a username entry means password-only AUTH.
        secret = credentials.name
        env.append(secret_ref(sa.USERNAME_ENV, secret, credentials.username_key, True))
        env.append(secret_ref(sa.PASSWORD_ENV, secret, credentials.password_key, False))
    return env


def sidecar_args(
    options: Options,
    tls: TlsRefs,
    pinned: Sequence[str],
    masters: Sequence[str] = (),
    holders: int = 1,
    native: bool = False,
) -> sa.SidecarArgs:
    """The sidecar's command line for this pod (``holders``: the lock's ``spec.holders``;
    ``native``: a native sidecar, which the kubelet stops only after the app exited)."""
    return sa.SidecarArgs(
        lock_ref=options.lock,
        ready=options.ready,
        http_port=options.http_port,
        probe_port=options.probe_port,
        pinned_nodes=tuple(pinned),
        allowed_masters=tuple(masters),
        pod_label=options.pod_label,
        lease_mirror=options.lease_mirror,
        events=options.events,
        metrics_port=options.metrics_port,
        tls_ca=tls.ca is not None,
        tls_client=tls.client is not None,
        api_locks=options.api_locks,
        drain_timeout=options.drain_timeout,
        holders=holders,
        app_stops_first=native and options.drain_timeout > 0,  # a drain to skip on SIGTERM
    )


def sidecar_container(
    options: Options,
    config: InjectConfig,
    credentials: SecretRef | None,
    tls: TlsRefs | None = None,
    pinned: Sequence[str] = (),
    masters: Sequence[str] = (),
    holders: int = 1,
) -> dict[str, Any]:
    """The sidecar container exactly as injected; ``pinned``: the node URLs the Secrets'
    consent was checked for (one ``--pinned-node`` each; the sidecar uses no others);
    ``masters``: the masters a Sentinel may name (one ``--allowed-master`` each);
    ``holders``: the lock's ``spec.holders`` (``--holders`` when more than 1)."""
    tls = tls or TlsRefs()
    container: dict[str, Any] = {
        "name": SIDECAR_NAME,
        "image": config.image,
        "imagePullPolicy": config.pull_policy,
    }
    if config.native:
        container["restartPolicy"] = "Always"
    if options.metrics_port is not None:
        container["ports"] = [
            {"name": METRICS_PORT_NAME, "containerPort": options.metrics_port, "protocol": "TCP"}
        ]
    container["args"] = sidecar_args(options, tls, pinned, masters, holders, config.native).argv()
    container["env"] = _env(credentials)
    container.update(_probes(options))
    container["resources"] = copy.deepcopy(dict(config.resources))
    container["securityContext"] = copy.deepcopy(dict(SECURITY_CONTEXT))
    container["volumeMounts"] = [
        {"name": STATE_VOLUME, "mountPath": STATE_DIR},
        {"name": KUBE_API_VOLUME, "mountPath": KUBE_API_DIR, "readOnly": True},
        *_tls_mounts(tls),
    ]
    return container


def pod_volumes(tls: TlsRefs) -> list[dict[str, Any]]:
    """The state volume (in memory), the sidecar's own projected token, and the TLS Secrets."""
    namespace = {"fieldPath": "metadata.namespace"}  # apiVersion v1: the default
    token_sources = [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": namespace}]}},
    ]
    return [
        {"name": STATE_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": KUBE_API_VOLUME, "projected": {"defaultMode": 0o644, "sources": token_sources}},
        *tls_volumes(tls),
    ]
