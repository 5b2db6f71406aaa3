"""Who a process is to the Kubernetes API, as one :class:`ClusterAuth`: in-cluster (the pod's
service account), the current context of a kubeconfig (the operator; kopf's login uses it
too), or an explicit API URL (the sidecar's ``--kube-api``: tests, ``kubectl proxy``).

A kubeconfig is read for what a context plainly states: the server, its CA (file or data),
``insecure-skip-tls-verify``, a bearer token (``token`` or ``tokenFile``) or a client
certificate (file or data). Credentials that need a program to run (``exec``,
``auth-provider``) are refused with one line; run ``kubectl proxy`` and point a kubeconfig
without credentials at it instead.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redlease import __version__
from redlease.errors import ConfigError

FIELD = "KUBECONFIG"  # what a failed login names: where the credentials come from


@dataclass(frozen=True, slots=True)
class ClusterAuth:
    """A :class:`~redlease.kube.client.KubeAuth`: the API server, its CA and the client's
    credentials. A ``token_file`` is read again on every request (bound service-account tokens
    rotate); ``*_data`` fields hold PEM text."""

    server: str
    token: str | None = None
    token_file: Path | None = None
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: str | None = None
    key_data: str | None = None
    insecure: bool = False
    namespace: str | None = None  # the context's (or the pod's) namespace
    identity: str = "operator"  # in the user agent, as the API server's audit log shows it
    agent: str = "redlease-operator"  # the program, in the user agent

    def base_url(self) -> str:
        return self.server.rstrip("/")

    def current_token(self) -> str | None:
        """The bearer token now (the file's content when there is a file)."""
        if self.token_file is not None:
            return self.token_file.read_text().strip() or None
        return self.token

    def credentials(self) -> dict[str, str]:
        token = self.current_token()
        return {"Authorization": "Bearer " + token} if token else {}

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_data)
        with self._client_cert() as (cert, key):
            if cert is not None:
                context.load_cert_chain(cert, key)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    @contextlib.contextmanager
    def _client_cert(self) -> Iterator[tuple[str | None, str | None]]:
        """The client certificate and key as files (``ssl`` loads them from files only: data
        lives in a private temporary directory for as long as the context takes to load)."""
        if self.cert_data is None:
            yield self.cert_file, self.key_file
            return
        with tempfile.TemporaryDirectory(prefix="redlease-") as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_text(self.cert_data)
            key.write_text(self.key_data or "")
            yield str(cert), str(key)

    def user_agent(self) -> str:
        return f"{self.agent}/{__version__} ({self.identity})"


def required(auth: ClusterAuth | None) -> ClusterAuth:
    """``auth``; without one (the sidecar outside a cluster, no ``--kube-api``) the one line
    that says there is no API."""
    if auth is None:
        raise ConfigError(
            "--kube-api", "no Kubernetes API: not in a cluster (KUBERNETES_SERVICE_HOST unset)"
        )
    return auth


def service_account_namespace(sa_dir: Path) -> str | None:
    """The namespace the pod's service account is mounted with (None outside a pod)."""
    ns = sa_dir / "namespace"
    return (ns.read_text().strip() if ns.exists() else "") or None


def in_cluster(api: str, sa_dir: Path, namespace: str | None = None) -> ClusterAuth:
    """The pod's service account: its token (re-read on every request), CA and namespace
    (``namespace`` when the caller has read it, else the service account's)."""
    ca = sa_dir / "ca.crt"
    return ClusterAuth(
        server=api,
        token_file=sa_dir / "token",
        ca_file=str(ca) if ca.exists() else None,
        namespace=namespace or service_account_namespace(sa_dir),
    )


def from_kubeconfig(paths: Sequence[Path]) -> ClusterAuth:
    """The current context of the kubeconfig files ``paths`` (merged as kubectl does: the
    first file naming a context, cluster or user wins); a :class:`ConfigError` on KUBECONFIG."""
    import yaml  # type: ignore[import-untyped]

    current: str | None = None
    named: dict[str, dict[str, Mapping[str, Any]]] = {"contexts": {}, "clusters": {}, "users": {}}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(FIELD, f"cannot read {path}: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError(FIELD, f"{path} is not a kubeconfig")
        current = current or doc.get("current-context")
        for kind, entries in named.items():
            for item in doc.get(kind) or []:
                body = item.get(kind[:-1]) if isinstance(item, dict) else None
                if isinstance(body, dict):
                    entries.setdefault(str(item.get("name")), body)
    where = os.pathsep.join(map(str, paths))
    if not current:
        raise ConfigError(FIELD, f"no current-context in {where}")
    context = named["contexts"].get(current)
    if context is None:
        raise ConfigError(FIELD, f"context {current!r} not found in {where}")
    cluster = named["clusters"].get(str(context.get("cluster")))
    if cluster is None or not cluster.get("server"):
        raise ConfigError(FIELD, f"context {current!r}: no cluster with a server in {where}")
    user = named["users"].get(str(context.get("user")), {})
    if "exec" in user or "auth-provider" in user:
        raise ConfigError(
            FIELD,
            f"context {current!r}: exec and auth-provider credentials are not supported "
            "(run `kubectl proxy` and use a kubeconfig without credentials pointing at it)",
        )
    token_file = user.get("tokenFile")
    return ClusterAuth(
        server=str(cluster["server"]),
        token=user.get("token"),
        token_file=Path(token_file) if token_file else None,
        ca_file=cluster.get("certificate-authority"),
        ca_data=_pem(cluster, "certificate-authority-data"),
        cert_file=user.get("client-certificate"),
        key_file=user.get("client-key"),
        cert_data=_pem(user, "client-certificate-data"),
        key_data=_pem(user, "client-key-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        namespace=context.get("namespace"),
    )


def _pem(entry: Mapping[str, Any], key: str) -> str | None:
    value = entry.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        raise ConfigError(FIELD, f"{key} is not base64 PEM") from None
