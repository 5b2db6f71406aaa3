"""Who a process is to the Kubernetes API, as a :class:`Login`: in-cluster (the pod's service
account: :class:`ClusterAuth`, read here without the ``kubernetes`` package, which the sidecar
never imports), or an explicit API URL (the sidecar's ``--kube-api``: tests, ``kubectl proxy``).
A kubeconfig's current context (the operator outside a cluster) is
:mod:`redlease.kube.credentials`' (the official client's loader: exec plugins, auth-provider).

Both answer the same questions: the API client asks for headers on every request
(:class:`~redlease.kube.client.KubeAuth`), kopf's login takes a :meth:`Login.snapshot`.
"""

from __future__ import annotations

import contextlib
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from redlease import __version__
from redlease.core.urls import is_loopback
from redlease.errors import ConfigError


class Login(Protocol):
    """A :class:`~redlease.kube.client.KubeAuth` that can also hand its credentials as they are
    now to another client (kopf's login)."""

    def base_url(self) -> str: ...

    def credentials(self) -> dict[str, str]: ...

    def cached_credentials(self) -> dict[str, str] | None: ...

    def ssl_context(self) -> ssl.SSLContext | bool: ...

    def user_agent(self) -> str: ...

    def rejected(self) -> None: ...

    def snapshot(self) -> ClusterAuth:
        """The credentials as they are now: a token (no file), files or PEM data, and when
        they stop being good (``expires``: another client logs in again then). May block as
        :meth:`credentials` does (a thread's call)."""
        ...


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
    scheme: str = "Bearer"  # how the token is sent (``Basic``: a kubeconfig's username/password)
    expires: datetime | None = None  # when a snapshot's token must be fetched again

    def base_url(self) -> str:
        return self.server.rstrip("/")

    def current_token(self) -> str | None:
        """The bearer token now (the file's content when there is a file)."""
        if self.token_file is not None:
            return self.token_file.read_text().strip() or None
        return self.token

    def credentials(self) -> dict[str, str]:
        token = self.current_token()
        return {"Authorization": f"{self.scheme} {token}"} if token else {}

    def cached_credentials(self) -> dict[str, str]:
        """:meth:`credentials`: a token file's read never waits for anything slow."""
        return self.credentials()

    def rejected(self) -> None:
        """Nothing to do on a 401: a token file is read again on every request anyway."""

    def snapshot(self) -> ClusterAuth:
        return replace(self, token=self.current_token(), token_file=None)

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


def check_api_url(url: str) -> bool:
    """Whether the token may be sent to ``url``: https only. Plain http is accepted for a
    proxy on this host (kubectl proxy, tests), which then gets no token; anything else is a
    :class:`ConfigError` naming ``--kube-api``."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError("--kube-api", f"not an http(s) URL: {url!r}")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ConfigError(
            "--kube-api",
            "use https:// (the service-account token must not travel in plain text); "
            f"http:// only for a proxy on this host, got {url!r}",
        )
    return parts.scheme == "https"
