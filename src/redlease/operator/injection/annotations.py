"""The ``redlease.dev/*`` pod annotations: their names (the webhook, the CLI, the chart tests
and the docs use these) and :func:`read_options`, what one pod asks for."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redlease.core.durations import parse_duration
from redlease.core.keys import validate_name
from redlease.core.urls import digits
from redlease.errors import ConfigError
from redlease.kube.names import DEFAULT_READY, GROUP, READY_MODES
from redlease.kube.sidecar_args import DEFAULT_HTTP_PORT, DEFAULT_PROBE_PORT
from redlease.kube.spec import validate_object_name

LOCK_ANNOTATION = f"{GROUP}/lock"  # opt in: the DistributedLock (same namespace) to follow
INJECT_ANNOTATION = f"{GROUP}/inject"  # "false": opt out
READY_ANNOTATION = f"{GROUP}/ready"  # connected (default) | leader | always
POD_LABEL_ANNOTATION = f"{GROUP}/pod-label"  # "true": keep redlease.dev/leader on the pod
HTTP_PORT_ANNOTATION = f"{GROUP}/http-port"  # the sidecar's loopback port (4040)
LEASE_MIRROR_ANNOTATION = f"{GROUP}/lease-mirror"  # "true": keep a coordination.k8s.io Lease
EVENTS_ANNOTATION = f"{GROUP}/events"  # "true": post became/stopped-leading Events
METRICS_PORT_ANNOTATION = f"{GROUP}/metrics-port"  # /metrics alone on the pod IP, for scrapers
PROBE_PORT_ANNOTATION = f"{GROUP}/probe-port"  # /healthz, /readyz alone on the pod IP (4041)
API_LOCKS_ANNOTATION = f"{GROUP}/api-locks"  # PREFIX: the lock API for names under it
DRAIN_TIMEOUT_ANNOTATION = f"{GROUP}/drain-timeout"  # DURATION: drain before a step-down
DAPR_PORT_ANNOTATION = f"{GROUP}/dapr-port"  # "true": DAPR_HTTP_PORT in the app containers
INJECTED_ANNOTATION = f"{GROUP}/injected"  # set by the injector: the redlease version
# Every pod annotation redlease reads: the one list (a new annotation is added here and nowhere
# else for the unknown-annotation warnings and their did-you-mean to know it).
OPTION_ANNOTATIONS = (
    LOCK_ANNOTATION,
    INJECT_ANNOTATION,
    READY_ANNOTATION,
    POD_LABEL_ANNOTATION,
    HTTP_PORT_ANNOTATION,
    LEASE_MIRROR_ANNOTATION,
    EVENTS_ANNOTATION,
    METRICS_PORT_ANNOTATION,
    PROBE_PORT_ANNOTATION,
    API_LOCKS_ANNOTATION,
    DRAIN_TIMEOUT_ANNOTATION,
    DAPR_PORT_ANNOTATION,
    INJECTED_ANNOTATION,
)


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
    probe_port: int = DEFAULT_PROBE_PORT  # the kubelet's httpGet probes (no lock data there)
    api_locks: str | None = None  # the lock API's name prefix; None: off
    drain_timeout: float = 0.0  # seconds; 0: off
    dapr_port: bool = False  # set DAPR_HTTP_PORT (the sidecar's port) in the app containers


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return annotations if isinstance(annotations, Mapping) else {}


def unknown_annotations(pod: Mapping[str, Any]) -> list[str]:
    """The pod's ``redlease.dev/*`` annotations that mean nothing to the injector (sorted)."""
    return [
        key
        for key in sorted(annotations_of(pod))
        if key.startswith(f"{GROUP}/") and key not in OPTION_ANNOTATIONS
    ]


def annotation_warnings(pod: Mapping[str, Any]) -> list[str]:
    """One warning per unknown ``redlease.dev/*`` annotation, with the closest known one
    (``unknown annotation redlease.dev/lokc: did you mean redlease.dev/lock?``): a misspelt
    annotation is otherwise ignored in silence. When none of the pod's annotations asks for a
    sidecar (no ``redlease.dev/lock``) but some ``redlease.dev/*`` one is there, a last warning
    says that nothing was injected. Values are never shown."""
    known = {key.lower(): key for key in OPTION_ANNOTATIONS if key != INJECTED_ANNOTATION}
    warnings = []
    for key in unknown_annotations(pod):
        close = difflib.get_close_matches(key.lower(), list(known), n=1, cutoff=0.8)
        why = f"did you mean {known[close[0]]}?" if close else "ignored"
        warnings.append(f"unknown annotation {key}: {why}")
    annotations = annotations_of(pod)
    ours = [key for key in annotations if key.startswith(f"{GROUP}/")]
    if ours and LOCK_ANNOTATION not in annotations:
        warnings.append(
            f"no {LOCK_ANNOTATION} annotation: no sidecar injected (it names the "
            "DistributedLock to follow)"
        )
    return warnings


def _boolean(annotations: Mapping[str, str], key: str, default: bool) -> bool:
    raw = annotations.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f'must be "true" or "false", got {raw!r}')
    return value == "true"


def _port(annotations: Mapping[str, str], key: str, default: int | None) -> int | None:
    if key not in annotations:
        return default
    raw = str(annotations[key]).strip()
    number = digits(raw)
    if number is None or not 1024 <= number <= 65535:
        raise ConfigError(key, f"must be a port number from 1024 to 65535, got {raw!r}")
    return number


def _prefix(annotations: Mapping[str, str], key: str) -> str | None:
    """A lock-name prefix (the names the lock API serves start with it): the rule of lock
    names, so no ``#`` -- the sidecar puts the pod's namespace before every name it serves."""
    if key not in annotations:
        return None
    return validate_name(str(annotations[key]).strip(), key, scoped=False)


def _duration(annotations: Mapping[str, str], key: str) -> float:
    """A duration in the syntax of the sidecar's duration flags; 0 when absent."""
    if key not in annotations:
        return 0.0
    raw = str(annotations[key])
    try:
        return parse_duration(raw)
    except ValueError:
        raise ConfigError(
            key, f"must be a duration (5, 0.5, 5s, 500ms, 1m30s; 0 for off), got {raw!r}"
        ) from None


def _lock_name(annotations: Mapping[str, str]) -> str:
    lock = str(annotations[LOCK_ANNOTATION]).strip()
    if "/" in lock:
        raise ConfigError(
            LOCK_ANNOTATION,
            f"name a DistributedLock in the pod's own namespace (no NAMESPACE/), got {lock!r}",
        )
    return validate_object_name(lock, LOCK_ANNOTATION)


def read_options(pod: Mapping[str, Any]) -> Options | None:
    """The pod's injection request; ``None`` if it has no ``redlease.dev/lock`` annotation or
    opts out with ``redlease.dev/inject: "false"``. Raises ConfigError naming a bad annotation."""
    annotations = annotations_of(pod)
    if LOCK_ANNOTATION not in annotations:
        return None
    if not _boolean(annotations, INJECT_ANNOTATION, True):
        return None
    lock = _lock_name(annotations)
    ready = str(annotations.get(READY_ANNOTATION, DEFAULT_READY)).strip()
    if ready not in READY_MODES:
        raise ConfigError(
            READY_ANNOTATION, f"must be one of {', '.join(READY_MODES)}, got {ready!r}"
        )
    http_port = _port(annotations, HTTP_PORT_ANNOTATION, DEFAULT_HTTP_PORT)
    metrics_port = _port(annotations, METRICS_PORT_ANNOTATION, None)
    if metrics_port == http_port:
        raise ConfigError(METRICS_PORT_ANNOTATION, f"must differ from the http port {http_port}")
    probe_port = _port(annotations, PROBE_PORT_ANNOTATION, DEFAULT_PROBE_PORT)
    if probe_port in (http_port, metrics_port):
        taken = "http" if probe_port == http_port else "metrics"
        raise ConfigError(PROBE_PORT_ANNOTATION, f"must differ from the {taken} port {probe_port}")
    return Options(
        lock=lock,
        ready=ready,
        http_port=http_port or DEFAULT_HTTP_PORT,
        pod_label=_boolean(annotations, POD_LABEL_ANNOTATION, False),
        lease_mirror=_boolean(annotations, LEASE_MIRROR_ANNOTATION, False),
        events=_boolean(annotations, EVENTS_ANNOTATION, False),
        metrics_port=metrics_port,
        probe_port=probe_port or DEFAULT_PROBE_PORT,
        api_locks=_prefix(annotations, API_LOCKS_ANNOTATION),
        drain_timeout=_duration(annotations, DRAIN_TIMEOUT_ANNOTATION),
        dapr_port=_dapr_port(annotations),
    )


def _dapr_port(annotations: Mapping[str, str]) -> bool:
    """``redlease.dev/dapr-port``: Dapr's SDKs find the sidecar's Dapr routes through
    DAPR_HTTP_PORT; they are served with the lock API only."""
    asked = _boolean(annotations, DAPR_PORT_ANNOTATION, False)
    if asked and API_LOCKS_ANNOTATION not in annotations:
        raise ConfigError(
            DAPR_PORT_ANNOTATION,
            f"Dapr's lock routes come with the lock API: add {API_LOCKS_ANNOTATION}: PREFIX",
        )
    return asked
