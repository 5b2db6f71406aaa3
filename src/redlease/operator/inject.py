"""Sidecar injection, pure: a pod and its DistributedLock -> a JSON patch and warnings, or a denial.

No I/O. The admission webhook (:mod:`redlease.operator.webhook`) and ``redlease inject``
(:mod:`redlease.cli.inject`) run the same two steps: :func:`read_options` (the pod's
annotations; ``None`` when the pod does not ask for a sidecar), then, with whatever the caller
found for the named DistributedLock, :func:`plan`. A denial is a
:class:`~redlease.errors.ConfigError` whose ``field`` names the annotation (or pod field) at
fault; anything that would give a pod that cannot work is denied, never patched.

What an injected pod gets (docs/sidecar.md "Injection"): the sidecar (a native sidecar, i.e. an
init container with ``restartPolicy: Always``, or a plain container), the state volume (also
mounted read-only into every app container: the state file and the ``leader`` marker are how
apps without an HTTP client learn whether they lead, and read-only means an app cannot forge the
marker), POD_NAME/POD_NAMESPACE, the lock's credentials as ``secretKeyRef`` env of the sidecar
only, probes, resources, a restricted security context, and the Kubernetes token in the sidecar
only (a projected volume; the pod's own automount is turned off unless the pod asked for it).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease import __version__
from redlease.core.connect import digits
from redlease.errors import ConfigError
from redlease.kube.spec import (
    DEFAULT_READY,
    GROUP,
    LEADER_LABEL,
    READY_MODES,
    LockSpec,
    SecretRef,
    TlsRefs,
    check_consent,
    parse_spec,
    validate_object_name,
)

# --- the annotations (one place: webhook, CLI, chart tests and docs use these names) ----------
LOCK_ANNOTATION = f"{GROUP}/lock"  # opt in: the DistributedLock (same namespace) to follow
INJECT_ANNOTATION = f"{GROUP}/inject"  # "false": opt out
READY_ANNOTATION = f"{GROUP}/ready"  # connected (default) | leader | always
POD_LABEL_ANNOTATION = f"{GROUP}/pod-label"  # "true": keep redlease.dev/leader on the pod
HTTP_PORT_ANNOTATION = f"{GROUP}/http-port"  # the sidecar's loopback port (4040)
LEASE_MIRROR_ANNOTATION = f"{GROUP}/lease-mirror"  # "true": keep a coordination.k8s.io Lease
EVENTS_ANNOTATION = f"{GROUP}/events"  # "true": post became/stopped-leading Events
METRICS_PORT_ANNOTATION = f"{GROUP}/metrics-port"  # /metrics alone on the pod IP, for scrapers
METRICS_PORT_NAME = "redlease-metrics"  # the container port a PodMonitor selects
INJECTED_ANNOTATION = f"{GROUP}/injected"  # set by the injector: the redlease version
OPTION_ANNOTATIONS = (
    LOCK_ANNOTATION,
    INJECT_ANNOTATION,
    READY_ANNOTATION,
    POD_LABEL_ANNOTATION,
    HTTP_PORT_ANNOTATION,
    LEASE_MIRROR_ANNOTATION,
    EVENTS_ANNOTATION,
    METRICS_PORT_ANNOTATION,
    INJECTED_ANNOTATION,
)

# --- what the sidecar is started with (the sidecar's own defaults, checked equal by a test) ----
SIDECAR_NAME = "redlease"
STATE_VOLUME = "redlease-state"
KUBE_API_VOLUME = "redlease-kube-api-access"
STATE_DIR = "/var/run/redlease"
TLS_DIR = "/var/run/redlease-tls"  # spec.tls Secrets, mounted into the sidecar only
TLS_CA_VOLUME = "redlease-tls-ca"
TLS_CLIENT_VOLUME = "redlease-tls-client"
KUBE_API_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster config looks
DEFAULT_HTTP_PORT = 4040
DEFAULT_IMAGE = f"ghcr.io/redlease/redlease:{__version__}"
DEFAULT_RESOURCES: Mapping[str, Any] = {
    "requests": {"cpu": "10m", "memory": "48Mi"},
    "limits": {"memory": "128Mi"},
}
TOKEN_SECONDS = 3600  # projected token lifetime; the kubelet refreshes it at 80 %
SIDECAR_USER = 10001  # the image's numeric user (Dockerfile: USER 10001:10001)
SIDECAR_MODES = ("native", "container")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
# The service-account admission plugin runs before webhooks and adds this volume (and mounts it
# into every container) unless the pod or its ServiceAccount turned automount off.
_AUTOMOUNT_PREFIX = "kube-api-access-"


@dataclass(frozen=True, slots=True)
class InjectConfig:
    """Cluster-wide injection settings (operator flags / chart values ``injection.*``)."""

    image: str = DEFAULT_IMAGE
    pull_policy: str = "IfNotPresent"
    native: bool = True  # False: a plain container (clusters older than 1.29)
    require_lock: bool = False  # True: deny pods naming a DistributedLock that does not exist
    resources: Mapping[str, Any] = field(default_factory=lambda: copy.deepcopy(DEFAULT_RESOURCES))


@dataclass(frozen=True, slots=True)
class Options:
    """What one pod asks for, from its annotations."""

    lock: str
    ready: str = DEFAULT_READY
    http_port: int = DEFAULT_HTTP_PORT
    pod_label: bool = False
    lease_mirror: bool = False
    events: bool = False
    metrics_port: int | None = None


@dataclass(frozen=True, slots=True)
class LockLookup:
    """What the caller found for the named DistributedLock: the object, nothing (``found``
    false), or an error text (the API could not be asked); and for a lock with
    ``spec.auth.secretRef``, that Secret (only its consent -- label and allowed nodes -- is
    looked at; ``None``: not known, not checked) or why it could not be read; ``secrets``: the
    same for every Secret the lock names (``spec.tls`` too), by name."""

    obj: Mapping[str, Any] | None = None
    error: str | None = None
    secret: Mapping[str, Any] | None = None
    consent_error: str | None = None
    secrets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # by name (spec.tls)

    @property
    def found(self) -> bool:
        return self.obj is not None


def secret_name(lock: Mapping[str, Any] | None) -> str | None:
    """The Secret a lock object's ``spec.auth.secretRef`` names (None: none, or invalid)."""
    if lock is None:
        return None
    try:
        ref = parse_spec(lock.get("spec")).secret_ref
    except ConfigError:
        return None
    return ref.name if ref is not None else None


def secret_names(lock: Mapping[str, Any] | None) -> list[str]:
    """Every Secret a lock object names (auth, then spec.tls), each once; [] if invalid."""
    if lock is None:
        return []
    try:
        spec = parse_spec(lock.get("spec"))
    except ConfigError:
        return []
    names = [spec.secret_ref.name] if spec.secret_ref is not None else []
    return list(dict.fromkeys([*names, *spec.tls_refs.names()]))


NOT_FOUND = LockLookup()


@dataclass(frozen=True, slots=True)
class Injection:
    """The result of :func:`plan`: JSON patch operations (RFC 6902) and warnings."""

    patch: list[dict[str, Any]]
    warnings: list[str]


# --- step 1: the annotations ------------------------------------------------------------------


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return annotations if isinstance(annotations, Mapping) else {}


def _boolean(annotations: Mapping[str, str], key: str, default: bool) -> bool:
    raw = annotations.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f'must be "true" or "false", got {raw!r}')
    return value == "true"


def read_options(pod: Mapping[str, Any]) -> Options | None:
    """The pod's injection request; ``None`` if it has no ``redlease.dev/lock`` annotation or
    opts out with ``redlease.dev/inject: "false"``. Raises ConfigError naming a bad annotation."""
    annotations = annotations_of(pod)
    if LOCK_ANNOTATION not in annotations:
        return None
    if not _boolean(annotations, INJECT_ANNOTATION, True):
        return None
    lock = str(annotations[LOCK_ANNOTATION]).strip()
    if "/" in lock:
        raise ConfigError(
            LOCK_ANNOTATION,
            f"name a DistributedLock in the pod's own namespace (no NAMESPACE/), got {lock!r}",
        )
    validate_object_name(lock, LOCK_ANNOTATION)
    ready = str(annotations.get(READY_ANNOTATION, DEFAULT_READY)).strip()
    if ready not in READY_MODES:
        raise ConfigError(
            READY_ANNOTATION, f"must be one of {', '.join(READY_MODES)}, got {ready!r}"
        )
    http_port = _port(annotations, HTTP_PORT_ANNOTATION, DEFAULT_HTTP_PORT)
    metrics_port = _port(annotations, METRICS_PORT_ANNOTATION, None)
    if metrics_port == http_port:
        raise ConfigError(METRICS_PORT_ANNOTATION, f"must differ from the http port {http_port}")
    return Options(
        lock=lock,
        ready=ready,
        http_port=http_port or DEFAULT_HTTP_PORT,
        pod_label=_boolean(annotations, POD_LABEL_ANNOTATION, False),
        lease_mirror=_boolean(annotations, LEASE_MIRROR_ANNOTATION, False),
        events=_boolean(annotations, EVENTS_ANNOTATION, False),
        metrics_port=metrics_port,
    )


def _port(annotations: Mapping[str, str], key: str, default: int | None) -> int | None:
    if key not in annotations:
        return default
    raw = str(annotations[key]).strip()
    number = digits(raw)
    if number is None or not 1024 <= number <= 65535:
        raise ConfigError(key, f"must be a port number from 1024 to 65535, got {raw!r}")
    return number


# --- step 2: the patch ------------------------------------------------------------------------


def _pointer(*parts: str | int) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def _names(items: Sequence[Any]) -> set[str]:
    return {str(i.get("name")) for i in items if isinstance(i, Mapping)}


def _env_secret(name: str, secret: str, key: str, optional: bool) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def _env_field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def probe_command(port: int, path: str) -> list[str]:
    """An exec probe: GET ``path`` on the sidecar's loopback port, exit 0 only on HTTP 200.

    The kubelet sends HTTP probes to the pod IP, which cannot reach a server bound to
    127.0.0.1; the sidecar stays on loopback (its status is nobody else's business), so the
    probe runs inside the container. CPython's C socket module in an isolated interpreter
    without site-packages keeps it near the interpreter's start-up cost (~10 ms of CPU;
    ``http.client`` would be five times that)."""
    script = (
        "import _socket, sys\n"
        "s = _socket.socket()\n"
        "s.settimeout(2)\n"
        "head = b''\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {port}))\n"
        f"    s.sendall(b'GET {path} HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n')\n"
        "    while b'\\r\\n' not in head:\n"
        "        chunk = s.recv(256)\n"
        "        if not chunk:\n"
        "            break\n"
        "        head += chunk\n"
        "except OSError as e:\n"
        f"    sys.exit('{path}: ' + str(e))\n"
        "line = head.split(b'\\r\\n')[0].decode('latin-1')\n"
        f"sys.exit(0 if line.split(' ')[1:2] == ['200'] else '{path}: ' + (line or 'no answer'))\n"
    )
    return ["python", "-I", "-S", "-c", script]


def _probe(port: int, path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "exec": {"command": probe_command(port, path)},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def _tls_volumes(refs: TlsRefs) -> list[dict[str, Any]]:
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
    """``redlease-tls-ca`` at TLS_DIR/ca, ``redlease-tls-client`` at TLS_DIR/client."""
    return [
        {"name": v["name"], "mountPath": f"{TLS_DIR}/{v['name'].rsplit('-', 1)[1]}",
         "readOnly": True}
        for v in _tls_volumes(refs)
    ]  # fmt: skip


def _tls_args(refs: TlsRefs) -> list[str]:
    args = []
    if refs.ca is not None:
        args.append(f"--tls-ca-file={TLS_DIR}/ca/ca.crt")
    if refs.client is not None:
        args += [
            f"--tls-cert-file={TLS_DIR}/client/tls.crt",
            f"--tls-key-file={TLS_DIR}/client/tls.key",
        ]
    return args


def sidecar_container(
    options: Options,
    config: InjectConfig,
    credentials: SecretRef | None,
    tls: TlsRefs | None = None,
    pinned: Sequence[str] = (),
) -> dict[str, Any]:
    """The sidecar container exactly as injected; ``pinned``: the node URLs the Secrets'
    consent was checked for (one ``--pinned-node`` each; the sidecar uses no others)."""
    args = [
        "sidecar",
        f"--lock-ref={options.lock}",
        f"--ready={options.ready}",
        f"--http=127.0.0.1:{options.http_port}",
        f"--state-dir={STATE_DIR}",
        *(f"--pinned-node={url}" for url in pinned),
    ]
    if options.pod_label:
        args.append("--pod-label")
    if options.lease_mirror:
        args.append("--lease-mirror")
    if options.events:
        args.append("--events")
    if options.metrics_port is not None:
        args.append(f"--metrics=0.0.0.0:{options.metrics_port}")  # noqa: S104 - for scrapers
    tls = tls or TlsRefs()
    args += _tls_args(tls)
    env = [
        _env_field("POD_NAME", "metadata.name"),
        _env_field("POD_NAMESPACE", "metadata.namespace"),
    ]
    if credentials is not None:
        # Only the sidecar gets them, and it then never reads the Secret through the API.
        # optional: a Secret without a username entry means password-only AUTH.
        secret = credentials.name
        env.append(_env_secret("REDLEASE_USERNAME", secret, credentials.username_key, True))
        env.append(_env_secret("REDLEASE_PASSWORD", secret, credentials.password_key, False))
    # With --ready connected the app starts once the sidecar reaches a quorum of its nodes; a
    # leader-only /readyz would never let standbys start, so they wait for /healthz instead.
    startup_path = "/readyz" if options.ready == "connected" else "/healthz"
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
    container.update(
        {
            "args": args,
            "env": env,
            "startupProbe": _probe(options.http_port, startup_path, 2, 300),
            "readinessProbe": _probe(options.http_port, "/readyz", 5, 2),
            "livenessProbe": _probe(options.http_port, "/healthz", 10, 3),
            "resources": copy.deepcopy(dict(config.resources)),
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "runAsUser": SIDECAR_USER,
                "runAsGroup": SIDECAR_USER,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumeMounts": [
                {"name": STATE_VOLUME, "mountPath": STATE_DIR},
                {"name": KUBE_API_VOLUME, "mountPath": KUBE_API_DIR, "readOnly": True},
                *_tls_mounts(tls),
            ],
        }
    )
    return container


def _volumes() -> list[dict[str, Any]]:
    token_sources = [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {
            "downwardAPI": {
                "items": [
                    {
                        "path": "namespace",
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                    }
                ]
            }
        },
    ]
    return [
        {"name": STATE_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": KUBE_API_VOLUME, "projected": {"defaultMode": 0o644, "sources": token_sources}},
    ]


# What a pod's author learns when a lock's Secret does not consent: not which check failed
# (opt-in label or allowed nodes) nor what the Secret allows.
NO_CONSENT = "the lock's Secret does not consent to these nodes"


def _credentials(lock: LockLookup, where: str) -> tuple[LockSpec | None, str | None]:
    """(the lock's spec, None) from a valid lock whose Secrets (``spec.auth.secretRef`` and
    ``spec.tls``) consent to the lock's nodes, or (None, the problem).

    Secrets only by consent (docs/security.md): whoever writes a DistributedLock picks its
    Secrets and its nodes, so the injector wires a Secret into a pod only if it carries the
    consent label and, if it lists allowed nodes, the lock's nodes are among them -- the one
    check in :func:`redlease.kube.spec.check_consent`, as the operator and the sidecar apply it.
    """
    if lock.error is not None:
        return None, f"cannot read {where}: {lock.error}"
    if lock.obj is None:
        return None, f"{where} not found"
    try:
        spec = parse_spec(lock.obj.get("spec"))
    except ConfigError as exc:
        return None, f"{where} is invalid: {exc}"
    refs = [r for r in (spec.secret_ref, spec.tls_refs.ca, spec.tls_refs.client) if r is not None]
    for ref in refs:
        if lock.consent_error is not None:
            return None, (
                f"cannot check the consent of Secret {ref.name!r} ({lock.consent_error}), so "
                "its credentials are not wired into the pod"
            )
        secret = lock.secrets.get(ref.name)
        if secret is None and ref is spec.secret_ref:
            secret = lock.secret
        if secret is not None:
            try:
                check_consent(secret, ref, spec.target.urls)
            except ConfigError:
                return None, f"{where}: {NO_CONSENT}; its credentials are not wired into the pod"
    return spec, None


def pinned_urls(spec: LockSpec | None) -> tuple[str, ...]:
    """The node URLs a pod is pinned to: those of a lock whose Secrets are wired into it
    (credentials or TLS), whose consent was checked for exactly these nodes; none otherwise
    (the sidecar then reads the Secrets itself and checks their consent on every read)."""
    if spec is None or (spec.secret_ref is None and not spec.tls_refs):
        return ()
    return spec.target.urls


def _automount_removals(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Remove what the service-account admission plugin added for the pod's own token (only
    called when the pod did not set automountServiceAccountToken itself)."""
    volumes = _list(spec, "volumes")
    names = {
        str(v.get("name"))
        for v in volumes
        if isinstance(v, Mapping)
        and str(v.get("name", "")).startswith(_AUTOMOUNT_PREFIX)
        and "projected" in v
    }
    if not names:
        return []
    ops: list[dict[str, Any]] = []
    for kind in ("initContainers", "containers"):
        for ci, container in enumerate(_list(spec, kind)):
            mounts = _list(container, "volumeMounts")
            for mi in reversed(range(len(mounts))):
                if mounts[mi].get("name") in names:
                    ops.append(
                        {"op": "remove", "path": _pointer("spec", kind, ci, "volumeMounts", mi)}
                    )
    for vi in reversed(range(len(volumes))):
        if volumes[vi].get("name") in names:
            ops.append({"op": "remove", "path": _pointer("spec", "volumes", vi)})
    return ops


def _append(
    ops: list[dict[str, Any]],
    obj: Mapping[str, Any],
    path: tuple[str | int, ...],
    key: str,
    items: list[Any],
) -> None:
    """Append ``items`` to the list ``obj[key]`` (creating it when absent)."""
    if isinstance(obj.get(key), list):
        for item in items:
            ops.append({"op": "add", "path": _pointer(*path, key, "-"), "value": item})
    else:
        ops.append({"op": "add", "path": _pointer(*path, key), "value": list(items)})


def _existing_port(spec: Mapping[str, Any], port: int) -> str | None:
    for kind in ("initContainers", "containers"):
        for container in _list(spec, kind):
            for p in _list(container, "ports"):
                if isinstance(p, Mapping) and p.get("containerPort") == port:
                    return str(container.get("name"))
    return None


def plan(
    pod: Mapping[str, Any],
    namespace: str,
    options: Options,
    lock: LockLookup,
    config: InjectConfig,
) -> Injection:
    """The JSON patch that injects the sidecar into ``pod`` (empty if it is there already).

    Raises ConfigError (a denial) naming the annotation or field that makes injection
    impossible, and for a missing or unusable lock when ``config.require_lock`` is set."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError("spec", "the pod has no spec")
    annotations = annotations_of(pod)
    warnings: list[str] = []
    init = _list(spec, "initContainers")
    containers = _list(spec, "containers")
    if SIDECAR_NAME in _names(init) | _names(containers):
        if INJECTED_ANNOTATION not in annotations:
            warnings.append(
                f"{LOCK_ANNOTATION}: the pod already has a container named {SIDECAR_NAME!r}; "
                "nothing injected"
            )
        return Injection([], warnings)  # injected before (re-invocation): nothing twice

    ours = {STATE_VOLUME, KUBE_API_VOLUME, TLS_CA_VOLUME, TLS_CLIENT_VOLUME}
    taken = _names(_list(spec, "volumes")) & ours
    if taken:
        raise ConfigError("spec.volumes", f"volume name {sorted(taken)[0]!r} is already used")
    if spec.get("hostNetwork") is True:
        raise ConfigError(
            "spec.hostNetwork",
            "the sidecar listens on 127.0.0.1, which a host-network pod shares with the node",
        )
    for annotation, port in (
        (HTTP_PORT_ANNOTATION, options.http_port),
        (METRICS_PORT_ANNOTATION, options.metrics_port),
    ):
        owner = None if port is None else _existing_port(spec, port)
        if owner is not None:
            raise ConfigError(
                annotation,
                f"port {port} is already declared by container {owner!r}; choose another port",
            )

    where = f"DistributedLock {options.lock!r} in namespace {namespace!r}"
    lock_spec, problem = _credentials(lock, where)
    credentials = lock_spec.secret_ref if lock_spec is not None else None
    tls = lock_spec.tls_refs if lock_spec is not None else TlsRefs()
    if problem is not None:
        if config.require_lock:
            raise ConfigError(LOCK_ANNOTATION, problem)
        warnings.append(
            f"{LOCK_ANNOTATION}: {problem}; the sidecar waits until it can use it "
            "(its Redis credentials are set at admission: re-create the pod if the lock uses "
            "spec.auth)"
        )

    if options.ready == "leader":
        warnings.append(
            f"{READY_ANNOTATION}: leader: only the leader's pod is Ready, so a rolling update "
            "(maxUnavailable 25% of 3 = 0) cannot progress and a PodDisruptionBudget blocks "
            "drains; prefer connected and a Service selecting the leader label"
        )
    if not config.native and spec.get("restartPolicy") in ("Never", "OnFailure"):
        warnings.append(
            "spec.restartPolicy: a plain sidecar container never exits, so this pod will not "
            "complete; use native sidecars (Kubernetes 1.29+) or `redlease run` for Jobs"
        )
    for key in sorted(annotations):
        if key.startswith(f"{GROUP}/") and key not in OPTION_ANNOTATIONS:
            warnings.append(f"{key}: unknown annotation, ignored")

    ops: list[dict[str, Any]] = []
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        ops += _automount_removals(spec)
        ops.append({"op": "add", "path": "/spec/automountServiceAccountToken", "value": False})
    elif automount is True:
        warnings.append(
            "spec.automountServiceAccountToken: true: every container of this pod gets the "
            "ServiceAccount token and with it the sidecar's permissions; leave it unset so "
            "that only the sidecar gets one"
        )

    # the app containers read the state file (read-only: an app cannot forge leadership)
    for i, container in enumerate(containers):
        mounts = _list(container, "volumeMounts")
        if any(m.get("mountPath") == STATE_DIR for m in mounts if isinstance(m, Mapping)):
            warnings.append(
                f"spec.containers[{i}]: container {container.get('name')!r} already mounts "
                f"{STATE_DIR}; the redlease state volume is not mounted into it"
            )
            continue
        mount = {"name": STATE_VOLUME, "mountPath": STATE_DIR, "readOnly": True}
        _append(ops, container, ("spec", "containers", i), "volumeMounts", [mount])

    sidecar = sidecar_container(options, config, credentials, tls, pinned_urls(lock_spec))
    _append(ops, spec, ("spec",), "initContainers" if config.native else "containers", [sidecar])
    _append(ops, spec, ("spec",), "volumes", [*_volumes(), *_tls_volumes(tls)])
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    if isinstance(labels, Mapping) and LEADER_LABEL in labels:
        # only the sidecar says who leads: a pod created "leading" would get leader traffic
        ops.append({"op": "remove", "path": _pointer("metadata", "labels", LEADER_LABEL)})
    if isinstance(meta.get("annotations"), Mapping):
        ops.append(
            {
                "op": "add",
                "path": _pointer("metadata", "annotations", INJECTED_ANNOTATION),
                "value": __version__,
            }
        )
    else:
        ops.append(
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {INJECTED_ANNOTATION: __version__},
            }
        )
    return Injection(ops, warnings)


# --- applying a patch (the CLI and the webhook apply the same operations) -------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: dict[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Apply the ``add``/``remove``/``replace`` operations :func:`plan` makes, in place."""
    for op in ops:
        *parents, last = [_unescape(t) for t in str(op["path"]).split("/")[1:]]
        target: Any = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        kind = op["op"]
        value = copy.deepcopy(op.get("value"))
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if kind == "add":
                target.insert(index, value)
            elif kind == "remove":
                del target[index]
            elif kind == "replace":
                target[index] = value
            else:
                raise ValueError(f"unsupported JSON patch operation {kind!r}")
        elif kind in ("add", "replace"):
            target[last] = value
        elif kind == "remove":
            del target[last]
        else:
            raise ValueError(f"unsupported JSON patch operation {kind!r}")
    return doc


def patched(pod: Mapping[str, Any], injection: Injection) -> dict[str, Any]:
    """A copy of ``pod`` with the injection applied."""
    return apply_patch(json.loads(json.dumps(pod)), injection.patch)
