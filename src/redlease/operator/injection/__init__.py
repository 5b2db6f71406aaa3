"""Sidecar injection, pure: a pod and its DistributedLock -> the injected pod, its JSON patch and
warnings, or a denial.

No I/O. The admission webhook (:mod:`redlease.operator.webhook`) and ``redlease inject``
(:mod:`redlease.cli.inject`) run the same steps: :func:`read_options` (the pod's annotations;
``None`` when the pod does not ask for a sidecar), a :class:`LockLookup` of whatever the caller
found for the named DistributedLock (its spec parsed there, once), then :func:`plan`.

One job per module: :mod:`.annotations` (the ``redlease.dev/*`` names and their parsing),
:mod:`.lookup` (the lock found and the Secrets' consent), :mod:`.container` (the sidecar
container and volumes), :mod:`.plan` (deny, leave, or inject; the patch).

What an injected pod gets (docs/sidecar.md "Injection"): the sidecar (a native sidecar, i.e. an
init container with ``restartPolicy: Always``, or a plain container), the state volume (also
mounted read-only into every app container: the state file and the ``leader`` marker are how
apps without an HTTP client learn whether they lead, and read-only means an app cannot forge the
marker), POD_NAME/POD_NAMESPACE, the lock's credentials as ``secretKeyRef`` env of the sidecar
only, probes, resources, a restricted security context, and the Kubernetes token in the sidecar
only (a projected volume; the pod's own automount is turned off unless the pod asked for it).
"""

from redlease.operator.injection.annotations import (
    API_LOCKS_ANNOTATION,
    DAPR_PORT_ANNOTATION,
    DRAIN_TIMEOUT_ANNOTATION,
    EVENTS_ANNOTATION,
    HTTP_PORT_ANNOTATION,
    INJECT_ANNOTATION,
    INJECTED_ANNOTATION,
    LEASE_MIRROR_ANNOTATION,
    LOCK_ANNOTATION,
    METRICS_PORT_ANNOTATION,
    OPTION_ANNOTATIONS,
    POD_LABEL_ANNOTATION,
    PROBE_PORT_ANNOTATION,
    READY_ANNOTATION,
    Options,
    annotation_warnings,
    annotations_of,
    read_options,
)
from redlease.operator.injection.container import (
    DEFAULT_IMAGE,
    DEFAULT_RESOURCES,
    KUBE_API_DIR,
    KUBE_API_VOLUME,
    METRICS_PORT_NAME,
    PULL_POLICIES,
    SIDECAR_MODES,
    SIDECAR_NAME,
    SIDECAR_USER,
    STATE_DIR,
    STATE_VOLUME,
    TLS_CA_VOLUME,
    TLS_CLIENT_VOLUME,
    TLS_DIR,
    InjectConfig,
    sidecar_container,
)
from redlease.operator.injection.lookup import (
    NO_CONSENT,
    NOT_FOUND,
    LockLookup,
    allowed_masters,
    pinned_urls,
)
from redlease.operator.injection.plan import Injection, plan

__all__ = [
    "API_LOCKS_ANNOTATION",
    "DAPR_PORT_ANNOTATION",
    "DEFAULT_IMAGE",
    "DEFAULT_RESOURCES",
    "DRAIN_TIMEOUT_ANNOTATION",
    "EVENTS_ANNOTATION",
    "HTTP_PORT_ANNOTATION",
    "INJECTED_ANNOTATION",
    "INJECT_ANNOTATION",
    "KUBE_API_DIR",
    "KUBE_API_VOLUME",
    "LEASE_MIRROR_ANNOTATION",
    "LOCK_ANNOTATION",
    "METRICS_PORT_ANNOTATION",
    "METRICS_PORT_NAME",
    "NOT_FOUND",
    "NO_CONSENT",
    "OPTION_ANNOTATIONS",
    "POD_LABEL_ANNOTATION",
    "PROBE_PORT_ANNOTATION",
    "PULL_POLICIES",
    "READY_ANNOTATION",
    "SIDECAR_MODES",
    "SIDECAR_NAME",
    "SIDECAR_USER",
    "STATE_DIR",
    "STATE_VOLUME",
    "TLS_CA_VOLUME",
    "TLS_CLIENT_VOLUME",
    "TLS_DIR",
    "InjectConfig",
    "Injection",
    "LockLookup",
    "Options",
    "allowed_masters",
    "annotation_warnings",
    "annotations_of",
    "pinned_urls",
    "plan",
    "read_options",
    "sidecar_container",
]
