"""The current context of a kubeconfig, loaded by the official ``kubernetes`` client's config
loader: every kubeconfig kubectl accepts (exec plugins such as ``aws eks get-token``,
``gke-gcloud-auth-plugin`` or ``kubelogin``, auth-provider ``oidc``/``gcp``, client
certificates, ``token``/``tokenFile``, username/password), merged from several files as kubectl
merges ``KUBECONFIG``.

The only module that imports ``kubernetes`` (import-linter checks it); the sidecar never imports
it (tests/kube/test_credentials.py). The operator outside a cluster logs in here, its API client
and kopf alike (:meth:`KubeconfigAuth.snapshot`).

Credentials are loaded again (the exec plugin runs again, a token file is read again):

* before an exec credential's ``expirationTimestamp``: at the latest 5 minutes before it (as the
  ``kubernetes`` client does), at half its lifetime for short-lived tokens;
* every minute otherwise (a ``tokenFile`` rotates; the loader's auth-providers refresh
  themselves once expired), except for an exec plugin without an expiry, which runs again only
  after a 401;
* after a 401 from the API server (:meth:`KubeconfigAuth.rejected`).

A plugin that fails keeps the last credentials (the loader logs why) and is tried again at
most every :data:`RETRY` seconds, so a broken plugin does not run on every request. The plugin
runs in the thread that asks for the credentials, once per token lifetime, like kubectl's.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from kubernetes.client import Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

from redlease import __version__
from redlease.errors import ConfigError
from redlease.kube.auth import ClusterAuth

FIELD = "KUBECONFIG"  # what a failed login names: where the credentials come from
SKEW = timedelta(minutes=5)  # the kubernetes client's margin before an expiry
RELOAD = 60.0  # seconds between loads of credentials without an expiry (a token file rotates)
RETRY = 5.0  # seconds at least between two loads after a failed one or a 401


class KubeconfigAuth:
    """A :class:`~redlease.kube.auth.Login` from the current context of kubeconfig files (see
    the module docstring); safe to use from several threads (the operator's kopf loops)."""

    def __init__(
        self, paths: Sequence[Path], identity: str = "operator", agent: str = "redlease-operator"
    ) -> None:
        self.identity = identity
        self.agent = agent
        self._where = os.pathsep.join(map(str, paths))
        self._lock = threading.Lock()
        self._config = Configuration()
        try:
            merger = KubeConfigMerger(self._where)
            if merger.config is None:
                raise ConfigException(f"no kubeconfig in {self._where}")
            self._loader = KubeConfigLoader(
                config_dict=merger.config,
                active_context=_first_current_context(merger),
                config_base_path=None,
                config_persister=merger.save_changes,  # refreshed oidc tokens, as kubectl does
            )
            context: Any = self._loader.current_context
            self.context = str(context["name"])
            self.namespace: str | None = context["context"].get("namespace")
            user_name = context["context"].get("user")
            users: Any = merger.config["users"]
            user: Any = users.get_with_name(user_name, safe=True) if user_name else None
            self._exec = user is not None and "exec" in user["user"]
            self._loader.load_and_set(self._config)
        except (ConfigException, yaml.YAMLError, OSError, KeyError, TypeError, AttributeError) as e:
            raise ConfigError(FIELD, f"cannot use the kubeconfig {self._where}: {e}") from None
        if not self._config.host:
            raise ConfigError(FIELD, f"context {self.context!r}: no cluster server")
        if self._exec and not self._header() and not self._config.cert_file:
            raise ConfigError(
                FIELD,
                f"context {self.context!r}: the exec plugin gave no credentials "
                "(its error is logged above)",
            )
        self._loaded = time.monotonic()
        self._expiry = self._loaded_expiry()
        self._due = self._next_due()

    # -- KubeAuth -----------------------------------------------------------------------------

    def base_url(self) -> str:
        return str(self._config.host).rstrip("/")

    def credentials(self) -> dict[str, str]:
        with self._lock:
            if time.monotonic() >= self._due:
                self._reload()
            header = self._header()
        return {"Authorization": header} if header else {}

    def ssl_context(self) -> ssl.SSLContext | bool:
        return self.snapshot().ssl_context()

    def user_agent(self) -> str:
        return f"{self.agent}/{__version__} ({self.identity})"

    def rejected(self) -> None:
        """The API server answered 401: load the credentials again before the next request
        (not sooner than :data:`RETRY` after the last load)."""
        with self._lock:
            self._due = min(self._due, self._loaded + RETRY)

    def snapshot(self) -> ClusterAuth:
        """The credentials now (loaded again first if due); ``expires`` when they are due
        next (kopf then logs in again: :func:`redlease.operator.handlers.connection_info`)."""
        header = self.credentials().get("Authorization", "")
        scheme, _, token = header.partition(" ")
        with self._lock:
            config, due = self._config, self._due
            expires = None
            if self._expiry is not None:
                expires = datetime.now(UTC) + timedelta(seconds=max(due - time.monotonic(), 0))
            return ClusterAuth(
                server=self.base_url(),
                token=token or None,
                scheme=scheme or "Bearer",
                ca_file=config.ssl_ca_cert or None,
                cert_file=config.cert_file or None,
                key_file=config.key_file or None,
                insecure=not config.verify_ssl,
                namespace=self.namespace,
                identity=self.identity,
                agent=self.agent,
                expires=expires,
            )

    # -- loading ------------------------------------------------------------------------------

    def _header(self) -> str | None:
        keys = self._config.api_key  # "BearerToken" since kubernetes 36, "authorization" before
        value: Any = keys.get("BearerToken") or keys.get("authorization")
        # a token file's trailing newline stays in the client's header (client-go trims it)
        return str(value).strip() or None if value else None

    def _loaded_expiry(self) -> datetime | None:
        expiry: Any = getattr(self._loader, "expiry", None)  # an exec credential's
        if not isinstance(expiry, datetime):
            return None
        return expiry if expiry.tzinfo else expiry.replace(tzinfo=UTC)

    def _next_due(self) -> float:
        """When to load again (monotonic seconds), from what the last load gave."""
        now = time.monotonic()
        if self._expiry is None:
            return float("inf") if self._exec else now + RELOAD
        left = (self._expiry - datetime.now(UTC)).total_seconds()
        return now + max(left - SKEW.total_seconds(), left / 2, 0.0)

    def _reload(self) -> None:
        before = (self._header(), self._expiry)
        try:
            self._loader.load_and_set(self._config)
        except (ConfigException, OSError, KeyError, ValueError) as exc:
            _log_failure(self.context, exc)
        self._loaded = time.monotonic()
        self._expiry = self._loaded_expiry()
        failed = self._exec and (self._header(), self._expiry) == before
        # a failed plugin (or one handing out what has expired) is tried again, but not on
        # every call
        self._due = max(self._next_due(), self._loaded + RETRY) if failed else self._next_due()


def _first_current_context(merger: Any) -> str | None:
    """The current-context of the first file that sets one, as kubectl merges KUBECONFIG (the
    client's merger takes the last)."""
    for path in merger.paths:
        config = merger.config_files.get(path)
        if isinstance(config, dict) and config.get("current-context"):
            return str(config["current-context"])
    return None


def _log_failure(context: str, exc: Exception) -> None:
    import logging

    logging.getLogger("redlease.kube").warning(
        "context %r: loading the credentials again failed: %s", context, exc
    )


def from_kubeconfig(paths: Sequence[Path], identity: str = "operator") -> KubeconfigAuth:
    """The current context of the kubeconfig files ``paths`` (merged as kubectl does: the
    first file naming a context, cluster or user wins); a :class:`ConfigError` on KUBECONFIG."""
    return KubeconfigAuth(paths, identity=identity)
