"""What to do with one pod: deny it, leave it, or the pod with the sidecar -- and the JSON patch
(RFC 6902) between the two, computed by the ``jsonpatch`` library. Pure, no I/O.

A denial is a :class:`~redlease.errors.ConfigError` whose ``field`` names the annotation (or pod
field) at fault; anything that would give a pod that cannot work is denied, never patched.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redlease import __version__
from redlease.errors import ConfigError
from redlease.kube.names import LEADER_LABEL
from redlease.kube.secretspec import TlsRefs
from redlease.kube.spec import LockSpec
from redlease.operator.injection.annotations import (
    DRAIN_TIMEOUT_ANNOTATION,
    HTTP_PORT_ANNOTATION,
    INJECTED_ANNOTATION,
    LEASE_MIRROR_ANNOTATION,
    LOCK_ANNOTATION,
    METRICS_PORT_ANNOTATION,
    PROBE_PORT_ANNOTATION,
    READY_ANNOTATION,
    Options,
    annotation_warnings,
    annotations_of,
)
from redlease.operator.injection.container import (
    SIDECAR_NAME,
    STATE_DIR,
    STATE_VOLUME,
    VOLUMES,
    InjectConfig,
    pod_volumes,
    sidecar_container,
)
from redlease.operator.injection.lookup import (
    LockLookup,
    allowed_masters,
    pinned_urls,
    usable_spec,
)

# The service-account admission plugin runs before webhooks and adds this volume (and mounts it
# into every container) unless the pod or its ServiceAccount turned automount off.
_AUTOMOUNT_PREFIX = "kube-api-access-"
LEADER_WARNING = (
    f"{READY_ANNOTATION}: leader: only the leader's pod is Ready, so a rolling update "
    "(maxUnavailable 25% of 3 = 0) cannot progress and a PodDisruptionBudget blocks "
    "drains; prefer connected and a Service selecting the leader label"
)
JOB_WARNING = (
    "spec.restartPolicy: a plain sidecar container never exits, so this pod will not "
    "complete; use native sidecars (Kubernetes 1.29+) or `redlease run` for Jobs"
)
AUTOMOUNT_WARNING = (
    "spec.automountServiceAccountToken: true: every container of this pod gets the "
    "ServiceAccount token and with it the sidecar's permissions; leave it unset so "
    "that only the sidecar gets one"
)

DEFAULT_GRACE_SECONDS = 30  # a pod's terminationGracePeriodSeconds when it sets none
# Seconds the sidecar needs after its drain: the release, the step-down's state-file writes and
# the lock API's bounded release of the app's leases (sidecar/locktarget.py CLOSE_TIMEOUT, 2 s).
DRAIN_MARGIN_SECONDS = 5


def drain_grace_warning(grace: int, drain: float) -> str | None:
    """A warning when ``grace`` (terminationGracePeriodSeconds) leaves the drain no room:
    the kubelet SIGKILLs what still runs when it ends, and a sidecar killed mid-drain leaves
    the lease held until its TTL (safe, but the hand-off takes a TTL instead of milliseconds).
    The pod's field is not changed: the user set it (or left Kubernetes' default) for the app."""
    need = math.ceil(drain) + DRAIN_MARGIN_SECONDS
    if grace >= need:
        return None
    return (
        f"{DRAIN_TIMEOUT_ANNOTATION}: spec.terminationGracePeriodSeconds is {grace}, less than "
        f"the drain ({drain:.15g} s) + {DRAIN_MARGIN_SECONDS} s for the release: the kubelet may "
        "kill the sidecar mid-drain and the lease then stays held until its TTL; set it to at "
        f"least {need}"
    )


def _grace(spec: Mapping[str, Any]) -> int:
    value = spec.get("terminationGracePeriodSeconds")
    if isinstance(value, bool) or not isinstance(value, int):
        return DEFAULT_GRACE_SECONDS  # unset (or not a number: the API server refuses that)
    return value


@dataclass(frozen=True, slots=True)
class Injection:
    """The result of :func:`plan`: the pod given (``original``), the pod as injected, and
    warnings; :attr:`patch` is the JSON patch between the two."""

    original: dict[str, Any]
    pod: dict[str, Any]
    warnings: list[str]

    @property
    def changed(self) -> bool:
        return self.pod != self.original

    @property
    def patch(self) -> list[dict[str, Any]]:
        """The JSON patch (RFC 6902) from ``original`` to ``pod``; [] when nothing changes.
        Computed on each access (the webhook hands kopf the pod and never needs it)."""
        if not self.changed:
            return []
        import jsonpatch  # the operator extra; `redlease` without it must still start

        ops: list[dict[str, Any]] = jsonpatch.make_patch(self.original, self.pod).patch
        return ops


def _list(obj: Mapping[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def _names(items: Sequence[Any]) -> set[str]:
    return {str(i.get("name")) for i in items if isinstance(i, Mapping)}


def _existing_port(spec: Mapping[str, Any], port: int) -> str | None:
    for kind in ("initContainers", "containers"):
        for container in _list(spec, kind):
            for p in _list(container, "ports"):
                if isinstance(p, Mapping) and p.get("containerPort") == port:
                    return str(container.get("name"))
    return None


def _check(spec: Mapping[str, Any], options: Options) -> None:
    """Deny a pod the sidecar cannot work in."""
    taken = _names(_list(spec, "volumes")) & set(VOLUMES)
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
        (PROBE_PORT_ANNOTATION, options.probe_port),
    ):
        owner = None if port is None else _existing_port(spec, port)
        if owner is not None:
            raise ConfigError(
                annotation,
                f"port {port} is already declared by container {owner!r}; choose another port",
            )


def _lock_spec(
    namespace: str, options: Options, lock: LockLookup, config: InjectConfig
) -> tuple[LockSpec | None, list[str]]:
    """The lock's spec if its Secrets may be wired in; else a warning (or, with
    ``require_lock``, a denial)."""
    where = f"DistributedLock {options.lock!r} in namespace {namespace!r}"
    spec, problem = usable_spec(lock, where)
    if problem is None:
        return spec, []
    if config.require_lock:
        raise ConfigError(LOCK_ANNOTATION, problem)
    return None, [
        f"{LOCK_ANNOTATION}: {problem}; the sidecar waits until it can use it "
        "(its Redis credentials are set at admission: re-create the pod if the lock uses "
        "spec.auth)"
    ]


def _remove_automount(spec: dict[str, Any]) -> None:
    """Remove what the service-account admission plugin added for the pod's own token."""
    names = {
        str(v.get("name"))
        for v in _list(spec, "volumes")
        if isinstance(v, Mapping)
        and str(v.get("name", "")).startswith(_AUTOMOUNT_PREFIX)
        and "projected" in v
    }
    if not names:
        return
    for kind in ("initContainers", "containers"):
        for container in _list(spec, kind):
            if isinstance(container.get("volumeMounts"), list):
                container["volumeMounts"] = [
                    m for m in container["volumeMounts"] if m.get("name") not in names
                ]
    spec["volumes"] = [v for v in spec["volumes"] if v.get("name") not in names]


def _token(spec: dict[str, Any]) -> list[str]:
    """Only the sidecar gets a Kubernetes token, unless the pod asked for one itself."""
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        _remove_automount(spec)
        spec["automountServiceAccountToken"] = False
    elif automount is True:
        return [AUTOMOUNT_WARNING]
    return []


def _mount_state(spec: dict[str, Any]) -> list[str]:
    """The app containers read the state file (read-only: an app cannot forge leadership)."""
    warnings = []
    for i, container in enumerate(_list(spec, "containers")):
        mounts = _list(container, "volumeMounts")
        if any(m.get("mountPath") == STATE_DIR for m in mounts if isinstance(m, Mapping)):
            warnings.append(
                f"spec.containers[{i}]: container {container.get('name')!r} already mounts "
                f"{STATE_DIR}; the redlease state volume is not mounted into it"
            )
            continue
        mount = {"name": STATE_VOLUME, "mountPath": STATE_DIR, "readOnly": True}
        container["volumeMounts"] = [*mounts, mount]
    return warnings


DAPR_PORT_ENV = "DAPR_HTTP_PORT"  # where Dapr's SDKs send their calls (on localhost)


def _dapr_env(spec: dict[str, Any], port: int) -> list[str]:
    """``redlease.dev/dapr-port``: DAPR_HTTP_PORT = the sidecar's port in every app container
    (not in init containers: an app does not run there), unless a container sets it itself."""
    warnings = []
    for i, container in enumerate(_list(spec, "containers")):
        env = _list(container, "env")
        if any(isinstance(e, Mapping) and e.get("name") == DAPR_PORT_ENV for e in env):
            warnings.append(
                f"spec.containers[{i}]: container {container.get('name')!r} sets "
                f"{DAPR_PORT_ENV} itself; left as it is"
            )
            continue
        container["env"] = [*env, {"name": DAPR_PORT_ENV, "value": str(port)}]
    return warnings


def _mark(meta: dict[str, Any]) -> None:
    """Only the sidecar says who leads: a pod created "leading" would get leader traffic; and
    the pod says it was injected, by which version."""
    labels = meta.get("labels")
    if isinstance(labels, dict):
        labels.pop(LEADER_LABEL, None)
    if not isinstance(meta.get("annotations"), dict):
        meta["annotations"] = {}
    meta["annotations"][INJECTED_ANNOTATION] = __version__


def _warnings(pod: Mapping[str, Any], options: Options, config: InjectConfig) -> list[str]:
    spec = pod["spec"]
    warnings = [LEADER_WARNING] if options.ready == "leader" else []
    if not config.native and spec.get("restartPolicy") in ("Never", "OnFailure"):
        warnings.append(JOB_WARNING)
    # a native sidecar gets SIGTERM after the app exited and releases at once
    # (--app-stops-first): only a plain sidecar drains within the pod's grace period
    if options.drain_timeout > 0 and not config.native:
        grace = drain_grace_warning(_grace(spec), options.drain_timeout)
        if grace is not None:
            warnings.append(grace)
    warnings += annotation_warnings(pod)
    return warnings


def plan(
    pod: Mapping[str, Any],
    namespace: str,
    options: Options,
    lock: LockLookup,
    config: InjectConfig,
) -> Injection:
    """The pod with the sidecar injected and the JSON patch that makes it (empty if the sidecar
    is there already).

    Raises ConfigError (a denial) naming the annotation or field that makes injection
    impossible, and for a missing or unusable lock when ``config.require_lock`` is set."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ConfigError("spec", "the pod has no spec")
    before = dict(pod)  # never changed: ``after`` is a deep copy
    if SIDECAR_NAME in _names(_list(spec, "initContainers")) | _names(_list(spec, "containers")):
        if INJECTED_ANNOTATION in annotations_of(pod):
            return Injection(before, before, [])  # injected before (re-invocation): nothing twice
        warning = (f"{LOCK_ANNOTATION}: the pod already has a container named {SIDECAR_NAME!r}; "
                   "nothing injected")  # fmt: skip
        return Injection(before, before, [warning])
    _check(spec, options)
    lock_spec, warnings = _lock_spec(namespace, options, lock, config)
    holders = lock_spec.holders if lock_spec is not None else 1
    if holders > 1 and options.lease_mirror:  # the sidecar would refuse to start
        raise ConfigError(
            LEASE_MIRROR_ANNOTATION,
            f"a Lease names one holder: it cannot mirror spec.holders = {holders}; drop the "
            "annotation or use 1 holder",
        )
    warnings += _warnings(pod, options, config)
    after = copy.deepcopy(before)
    new = after["spec"]
    warnings += _token(new)
    warnings += _mount_state(new)
    if options.dapr_port:
        warnings += _dapr_env(new, options.http_port)
    tls = lock_spec.tls_refs if lock_spec is not None else TlsRefs()
    credentials = lock_spec.secret_ref if lock_spec is not None else None
    masters = allowed_masters(lock) if lock_spec is not None else ()
    pinned = pinned_urls(lock_spec)
    sidecar = sidecar_container(options, config, credentials, tls, pinned, masters, holders)
    kind = "initContainers" if config.native else "containers"
    new[kind] = [*_list(new, kind), sidecar]
    new["volumes"] = [*_list(new, "volumes"), *pod_volumes(tls)]
    if not isinstance(after.get("metadata"), dict):
        after["metadata"] = {}
    _mark(after["metadata"])
    return Injection(before, after, warnings)
