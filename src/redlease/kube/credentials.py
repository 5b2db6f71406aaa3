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
most every :data:`RETRY` seconds, so a broken plugin does not run on every request.

The plugin runs in the thread that loads, once per token lifetime, like kubectl's, and may take
seconds (an SSO round trip) or hang (the loader gives it no timeout, and hands out no process to
stop: it is not bounded here). So no event loop loads: :meth:`KubeconfigAuth.cached_credentials`
answers without loading or waiting, and the async client asks :meth:`KubeconfigAuth.credentials`
from a worker thread only when that has no answer (kopf's login runs in kopf's executor thread).
One thread loads at a time; the others keep the current credentials while they have not
expired, and wait for the load (at most :data:`WAIT` seconds) only once they have.
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
WAIT = 30.0  # seconds a caller whose credentials expired waits for another thread's load


class KubeconfigAuth:
    """A :class:`~redlease.kube.auth.Login` from the current context of kubeconfig files (see
    the module docstring); safe to use from several threads (the operator's kopf loops)."""

    def __init__(
        self, paths: Sequence[Path], identity: str = "operator", agent: str = "redlease-operator"
    ) -> None:
        self.identity = identity
        self.agent = agent
        self._where = os.pathsep.join(map(str, paths))
        self._lock = threading.Lock()  # the loaded state below: held for a few reads or writes
        self._loading = threading.Lock()  # one load at a time: the plugin runs under it
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
        self._header = _header(self._config)
        if self._exec and not self._header and not self._config.cert_file:
            raise ConfigError(
                FIELD,
                f"context {self.context!r}: the exec plugin gave no credentials "
                "(its error is logged above)",
            )
        self._loaded = time.monotonic()
        self._expiry = self._loaded_expiry()
        self._due = self._next_due(self._expiry)

    # -- KubeAuth -----------------------------------------------------------------------------

    def base_url(self) -> str:
        return str(self._config.host).rstrip("/")

    def cached_credentials(self) -> dict[str, str] | None:
        """The headers without loading or waiting (an event loop's call): None when a load is
        due and no other thread is loading, or one is but the current credentials have expired
        (then :meth:`credentials`, from a worker thread)."""
        with self._lock:
            header, due, expiry = self._header, self._due, self._expiry
        if time.monotonic() >= due and not (self._loading.locked() and _unexpired(expiry)):
            return None
        return {"Authorization": header} if header else {}

    def credentials(self) -> dict[str, str]:
        """The headers, loaded again first if due: may run the exec plugin, so never on an
        event loop (the module docstring). While another thread loads, the current credentials
        if they have not expired, else those of that load (waited for at most :data:`WAIT`
        seconds: a hung plugin leaves the expired ones, and a 401)."""
        headers = self.cached_credentials()
        if headers is not None:
            return headers
        if not self._loading.acquire(blocking=False):
            headers = self.cached_credentials()  # another thread loads: ours if still good
            if headers is not None:
                return headers
            if not self._loading.acquire(timeout=WAIT):
                return self._current()[0]
        try:
            if time.monotonic() >= self._due:  # not loaded by the thread waited for
                self._reload()
        finally:
            self._loading.release()
        return self._current()[0]

    def ssl_context(self) -> ssl.SSLContext | bool:
        return self._current()[1].ssl_context()  # never loads: a loop makes its sessions

    def user_agent(self) -> str:
        return f"{self.agent}/{__version__} ({self.identity})"

    def rejected(self) -> None:
        """The API server answered 401: load the credentials again before the next request
        (not sooner than :data:`RETRY` after the last load)."""
        with self._lock:
            self._due = min(self._due, self._loaded + RETRY)

    def snapshot(self) -> ClusterAuth:
        """The credentials now (loaded again first if due: a thread's call, as kopf's login
        is); ``expires`` when they are due next (kopf then logs in again:
        :func:`redlease.operator.handlers.connection_info`)."""
        self.credentials()
        return self._current()[1]

    # -- loading ------------------------------------------------------------------------------

    def _current(self) -> tuple[dict[str, str], ClusterAuth]:
        """The headers and the credentials as loaded last, without loading."""
        with self._lock:
            config, header, due, expiry = self._config, self._header, self._due, self._expiry
        scheme, _, token = (header or "").partition(" ")
        expires = None
        if expiry is not None:
            expires = datetime.now(UTC) + timedelta(seconds=max(due - time.monotonic(), 0))
        auth = ClusterAuth(
            server=str(config.host).rstrip("/"),
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
        return ({"Authorization": header} if header else {}), auth

    def _loaded_expiry(self) -> datetime | None:
        expiry: Any = getattr(self._loader, "expiry", None)  # an exec credential's
        if not isinstance(expiry, datetime):
            return None
        return expiry if expiry.tzinfo else expiry.replace(tzinfo=UTC)

    def _next_due(self, expiry: datetime | None) -> float:
        """When to load again (monotonic seconds), from what the last load gave."""
        now = time.monotonic()
        if expiry is None:
            return float("inf") if self._exec else now + RELOAD
        left = (expiry - datetime.now(UTC)).total_seconds()
        return now + max(left - SKEW.total_seconds(), left / 2, 0.0)

    def _reload(self) -> None:
        """Load into a new configuration (under ``_loading``) and switch to it in one step:
        the other threads read the old one meanwhile."""
        config = Configuration()
        try:
            self._loader.load_and_set(config)  # the loader keeps a failed plugin's last token
        except (ConfigException, OSError, KeyError, ValueError) as exc:
            _log_failure(self.context, exc)
            config = self._config
        header, expiry, loaded = _header(config), self._loaded_expiry(), time.monotonic()
        # a failed plugin (or one handing out what has expired) is tried again, but not on
        # every call
        failed = self._exec and (header, expiry) == (self._header, self._expiry)
        due = max(self._next_due(expiry), loaded + RETRY) if failed else self._next_due(expiry)
        with self._lock:
            self._config, self._header, self._expiry = config, header, expiry
            self._loaded, self._due = loaded, due


def _header(config: Any) -> str | None:
    """The Authorization header a loaded configuration sends (None: none)."""
    keys = config.api_key  # "BearerToken" since kubernetes 36, "authorization" before
    value: Any = keys.get("BearerToken") or keys.get("authorization")
    # a token file's trailing newline stays in the client's header (client-go trims it)
    return str(value).strip() or None if value else None


def _unexpired(expiry: datetime | None) -> bool:
    """Whether credentials with ``expiry`` (None: none known) are still good now."""
    return expiry is None or datetime.now(UTC) < expiry


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
