"""The sidecar's command line, declared once: the flags and paths an injected pod is started
with, which ``redlease sidecar``'s parser (:mod:`redlease.cli.sidecar`) reads its names and
defaults from and the injector (:mod:`redlease.operator.injection.container`) writes with
:meth:`SidecarArgs.argv`.

It lives in ``kube/`` because both sides need it and the layers (``cli > sidecar | operator >
kube``) let neither import the other. ``tests/operator/test_inject.py`` parses every argument
the injection writes with the real CLI parser and checks the config it gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

COMMAND = "sidecar"
ENV_PREFIX = "REDLEASE_"  # every flag also reads REDLEASE_<FLAG>: --state-dir -> REDLEASE_STATE_DIR

# --- flags -------------------------------------------------------------------------------------
LOCK_REF = "--lock-ref"
PINNED_NODE = "--pinned-node"
ALLOWED_MASTER = "--allowed-master"
READY = "--ready"
HTTP = "--http"
METRICS = "--metrics"
PROBES = "--probes"
STATE_DIR_FLAG = "--state-dir"
POD_LABEL = "--pod-label"
LEASE_MIRROR = "--lease-mirror"
EVENTS = "--events"
API_LOCKS = "--api-locks"
DAPR_STORE = "--dapr-store"
API_TOKEN_FILE = "--api-token-file"  # noqa: S105 - a flag name, not a secret
DRAIN_TIMEOUT = "--drain-timeout"
APP_STOPS_FIRST = "--app-stops-first"
HOLDERS = "--holders"
TLS_CA_FILE_FLAG = "--tls-ca-file"
TLS_CERT_FILE_FLAG = "--tls-cert-file"
TLS_KEY_FILE_FLAG = "--tls-key-file"

# --- defaults and paths ------------------------------------------------------------------------
LOOPBACK = "127.0.0.1"
DEFAULT_HTTP_PORT = 4040
DEFAULT_HTTP = f"{LOOPBACK}:{DEFAULT_HTTP_PORT}"
DEFAULT_METRICS = "off"
DEFAULT_PROBES = "off"
DEFAULT_PROBE_PORT = 4041  # an injected pod's probe-only listener (redlease.dev/probe-port)
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - the kubelet (probes) and scrapers reach the pod IP
STATE_DIR = "/var/run/redlease"  # the state file and the leader marker
TLS_DIR = "/var/run/redlease-tls"  # spec.tls Secrets as volumes, in the sidecar only
TLS_CA_SUBDIR = "ca"
TLS_CLIENT_SUBDIR = "client"
TLS_CA_FILE = f"{TLS_DIR}/{TLS_CA_SUBDIR}/ca.crt"
TLS_CERT_FILE = f"{TLS_DIR}/{TLS_CLIENT_SUBDIR}/tls.crt"
TLS_KEY_FILE = f"{TLS_DIR}/{TLS_CLIENT_SUBDIR}/tls.key"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # in-cluster token, CA

# --- environment the pod sets (Downward API and the lock's Secret) ----------------------------
POD_NAME_ENV = "POD_NAME"
POD_NAMESPACE_ENV = "POD_NAMESPACE"
USERNAME_ENV = f"{ENV_PREFIX}USERNAME"
PASSWORD_ENV = f"{ENV_PREFIX}PASSWORD"


def env_name(flag: str) -> str:
    """The environment variable a flag falls back to: ``--renew-deadline`` ->
    ``REDLEASE_RENEW_DEADLINE``."""
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


@dataclass(frozen=True, slots=True)
class SidecarArgs:
    """What an injected sidecar is told on its command line."""

    lock_ref: str
    ready: str
    http_port: int = DEFAULT_HTTP_PORT
    pinned_nodes: Sequence[str] = ()
    allowed_masters: Sequence[str] = ()  # Sentinel locks: the masters the Secret allows
    pod_label: bool = False
    lease_mirror: bool = False
    events: bool = False
    metrics_port: int | None = None  # /metrics on every interface, for scrapers
    probe_port: int | None = None  # /healthz and /readyz alone on every interface, for the kubelet
    tls_ca: bool = False  # the CA file is mounted at TLS_CA_FILE
    tls_client: bool = False  # the client pair is mounted at TLS_CERT_FILE / TLS_KEY_FILE
    api_locks: str | None = None  # the lock API's name prefix; None: off
    drain_timeout: float = 0.0  # seconds; 0: off
    app_stops_first: bool = False  # a native sidecar: SIGTERM comes after the app exited
    holders: int = 1  # spec.holders: N active of M (written when > 1)

    def argv(self) -> list[str]:
        """``sidecar`` and its flags, in a fixed order."""
        args = [
            COMMAND,
            f"{LOCK_REF}={self.lock_ref}",
            f"{READY}={self.ready}",
            f"{HTTP}={LOOPBACK}:{self.http_port}",
            *([f"{PROBES}={ANY_ADDRESS}:{self.probe_port}"] if self.probe_port else []),
            f"{STATE_DIR_FLAG}={STATE_DIR}",
            *(f"{PINNED_NODE}={url}" for url in self.pinned_nodes),
            *(f"{ALLOWED_MASTER}={url}" for url in self.allowed_masters),
        ]
        switches = ((POD_LABEL, self.pod_label), (LEASE_MIRROR, self.lease_mirror),
                    (EVENTS, self.events), (APP_STOPS_FIRST, self.app_stops_first))  # fmt: skip
        args += [flag for flag, on in switches if on]
        if self.metrics_port is not None:
            args.append(f"{METRICS}={ANY_ADDRESS}:{self.metrics_port}")
        if self.api_locks is not None:
            args.append(f"{API_LOCKS}={self.api_locks}")
        if self.holders > 1:
            args.append(f"{HOLDERS}={self.holders}")
        if self.drain_timeout > 0:
            args.append(f"{DRAIN_TIMEOUT}={self.drain_timeout:.15g}")  # seconds, the flag's syntax
        if self.tls_ca:
            args.append(f"{TLS_CA_FILE_FLAG}={TLS_CA_FILE}")
        if self.tls_client:
            args += [f"{TLS_CERT_FILE_FLAG}={TLS_CERT_FILE}", f"{TLS_KEY_FILE_FLAG}={TLS_KEY_FILE}"]
        return args
