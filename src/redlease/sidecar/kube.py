"""A small Kubernetes API client on aiohttp: the pod label and the DistributedLock reference.

Only a few calls are needed (patch own pod, read/watch one DistributedLock, read a Secret --
only when no credentials were given --, and, opt-in, a Lease and Events: :mod:`.mirror`), so
this talks to the API directly instead of pulling in a full client. In a pod it uses the
service-account token and CA (in-cluster config); ``--kube-api`` points it elsewhere (tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import structlog

from redlease import __version__
from redlease.errors import ConfigError, RedleaseError
from redlease.kube.spec import (
    GROUP,
    LEADER_LABEL,
    PLURAL,
    VERSION,
    LockSpec,
    credentials_from_secret,
    parse_spec,
    tls_material,
    with_tls_material,
)
from redlease.sidecar.config import ElectionConfig, KubeSettings, LockRef, election_from_spec

log = structlog.get_logger("redlease.sidecar")


class KubeError(RedleaseError):
    """The Kubernetes API refused or could not be reached; names the object. ``status`` is the
    HTTP status of a refusal (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeClient:
    """Authenticated JSON requests to the API server."""

    def __init__(self, settings: KubeSettings) -> None:
        if not settings.api:
            raise ConfigError(
                "--kube-api",
                "no Kubernetes API: not in a cluster (KUBERNETES_SERVICE_HOST unset)",
            )
        self.send_token = check_api_url(settings.api)
        self.settings = settings
        self.base = settings.api.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    def _ssl(self) -> ssl.SSLContext | bool:
        if not self.base.startswith("https://"):
            return False
        ca = self.settings.ca_file
        if ca is not None and ca.exists():
            return ssl.create_default_context(cafile=str(ca))
        return ssl.create_default_context()

    def _headers(self) -> dict[str, str]:
        # who is calling, in the API server's audit log (as client-go's user agent says it)
        agent = f"redlease-sidecar/{__version__} ({self.settings.pod_name or 'unknown pod'})"
        headers = {"Accept": "application/json", "User-Agent": agent}
        token_file = self.settings.token_file
        if self.send_token and token_file is not None and token_file.exists():
            # bound service-account tokens rotate: read the file on every request
            headers["Authorization"] = "Bearer " + token_file.read_text().strip()
        return headers

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl())
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> Any:
        headers = self._headers()
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        try:
            async with self.session().request(
                method,
                self.base + path,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise KubeError(
                        f"{method} {path}: HTTP {resp.status}: {_reason(text)}", resp.status
                    )
                return json.loads(text) if text else None
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as exc:
            raise KubeError(f"{method} {path}: {type(exc).__name__}: {exc}") from None

    async def stream(self, path: str, timeout: float) -> AsyncIterator[dict[str, Any]]:
        """Watch events of ``path`` (``?watch=true`` already in it) for at most ``timeout``."""
        try:
            async with self.session().get(
                self.base + path,
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout),
            ) as resp:
                if resp.status >= 400:
                    raise KubeError(
                        f"watch {path}: HTTP {resp.status}: {_reason(await resp.text())}"
                    )
                async with asyncio.timeout(timeout):
                    async for line in resp.content:
                        if line.strip():
                            yield json.loads(line)
        except (aiohttp.ClientError, json.JSONDecodeError) as exc:
            raise KubeError(f"watch {path}: {type(exc).__name__}: {exc}") from None


def check_api_url(url: str) -> bool:
    """Whether the token may be sent to ``url``: https only. Plain http is accepted for a
    proxy on this host (kubectl proxy, tests), which then gets no token; anything else is a
    :class:`ConfigError` naming ``--kube-api``."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError("--kube-api", f"not an http(s) URL: {url!r}")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ConfigError(
            "--kube-api",
            "use https:// (the service-account token must not travel in plain text); "
            f"http:// only for a proxy on this host, got {url!r}",
        )
    return parts.scheme == "https"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _reason(text: str) -> str:
    try:
        return str(json.loads(text).get("message", ""))[:200]
    except (ValueError, AttributeError):
        return text[:200]


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"


def lock_path(ref: LockRef, watch: bool = False) -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(ref.namespace)}/{PLURAL}"
    if watch:
        return f"{base}?watch=true&fieldSelector=metadata.name%3D{quote(ref.name)}"
    return f"{base}/{quote(ref.name)}"


class PodLabeller:
    """Keeps ``redlease.dev/leader=true|false`` on the sidecar's own pod, retrying on errors."""

    def __init__(self, client: KubeClient, namespace: str, pod: str) -> None:
        self.client = client
        self.namespace = namespace
        self.pod = pod
        self.desired: bool | None = None
        self.applied: bool | None = None
        self._wake = asyncio.Event()

    def set(self, leader: bool) -> None:
        if leader != self.desired:
            self.desired = leader
            self._wake.set()

    async def _patch(self, leader: bool) -> None:
        body = {"metadata": {"labels": {LEADER_LABEL: "true" if leader else "false"}}}
        await self.client.request(
            "PATCH",
            pod_path(self.namespace, self.pod),
            body=body,
            content_type="application/merge-patch+json",
            timeout=5.0,
        )

    async def run(self) -> None:
        delay = 0.5
        while True:
            await self._wake.wait()
            self._wake.clear()
            desired = self.desired
            if desired is None or desired == self.applied:
                continue
            try:
                await self._patch(desired)
            except KubeError as exc:
                log.warning("pod label update failed", pod=self.pod, error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                self._wake.set()
                continue
            delay = 0.5
            self.applied = desired
            log.info("pod label set", pod=self.pod, label=LEADER_LABEL, value=desired)

    async def final(self, timeout: float = 2.0) -> None:
        """On shutdown: label the pod ``false`` (best effort, bounded)."""
        if self.applied is False:
            return
        with contextlib.suppress(KubeError, TimeoutError):
            async with asyncio.timeout(timeout):
                await self._patch(False)
                self.applied = False


class LockRefFollower:
    """Reads a DistributedLock (and its Secret) into election settings and follows changes.

    The spec is parsed by :func:`redlease.kube.spec.parse_spec`, the same parser the operator
    uses; ``identity`` is this pod's own. Credentials given with the reference
    (``--username``/``--password``, i.e. ``REDLEASE_USERNAME``/``REDLEASE_PASSWORD``, which an
    injected pod takes from the Secret) are used as they are; only without them is the Secret
    named by ``spec.auth.secretRef`` read through the API (the same for TLS files and the Secrets
    of ``spec.tls``). Given credentials (and a given client certificate) are kept to the
    nodes the lock named when they were first used: the Secret's consent was checked for those
    (at admission, docs/security.md), so a lock that later names other nodes is refused until
    the pod restarts (and is checked again)."""

    def __init__(
        self,
        client: KubeClient,
        ref: LockRef,
        identity: str,
        on_config: Callable[[ElectionConfig], None],
        resync: float = 30.0,
    ) -> None:
        self.client = client
        self.ref = ref
        self.identity = identity
        self.on_config = on_config
        self.resync = resync
        self.generation: Any = None
        self.pinned_nodes: frozenset[str] | None = None  # where given credentials may go

    async def read(self, obj: dict[str, Any] | None = None) -> ElectionConfig:
        """The settings the object's spec asks for (reads the object unless given)."""
        if obj is None:
            obj = await self.client.request("GET", lock_path(self.ref))
        if not isinstance(obj, dict):
            raise KubeError(f"DistributedLock {self.ref}: the API answered {obj!r}")
        spec = parse_spec(obj.get("spec"))
        credentials = self.ref.credentials
        given_tls = self.ref.tls
        if credentials is not None or (given_tls is not None and given_tls.client_certificate):
            nodes = frozenset(spec.node_names)
            if self.pinned_nodes is None:
                self.pinned_nodes = nodes
            elif not nodes <= self.pinned_nodes:
                raise ConfigError(
                    "spec.nodes",
                    f"the credentials this sidecar was given are for {sorted(self.pinned_nodes)}"
                    f"; not sending them to {sorted(nodes - self.pinned_nodes)} (restart the pod "
                    "to use the new nodes)",
                )
        ref = spec.secret_ref
        if ref is not None and credentials is None:
            secret = await self._secret(ref.name)
            credentials = credentials_from_secret(secret, ref, spec.node_names)
        spec = await self._tls(spec)
        return election_from_spec(spec, self.identity, credentials, self.ref.replica_timeout)

    async def _secret(self, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{quote(self.ref.namespace)}/secrets/{quote(name)}"
        secret = await self.client.request("GET", path)
        return secret if isinstance(secret, dict) else {}

    async def _tls(self, spec: LockSpec) -> LockSpec:
        """TLS files given with the reference (flags) win; else ``spec.tls``'s Secrets are read
        (they must consent, as credentials must)."""
        given = self.ref.tls
        if given is not None:
            tls = dataclasses.replace(
                given,
                insecure_skip_verify=given.insecure_skip_verify
                or spec.target.tls.insecure_skip_verify,
            )
            return dataclasses.replace(spec, target=spec.target.with_tls(tls))
        refs = spec.tls_refs
        if not refs:
            return spec
        secrets = {name: await self._secret(name) for name in refs.names()}
        return with_tls_material(spec, tls_material(refs, secrets, spec.node_names))

    async def initial(self) -> ElectionConfig:
        """Read the object, retrying with back-off until it exists and its spec is valid."""
        delay = 0.5
        while True:
            try:
                return await self.read()
            except (KubeError, ConfigError) as exc:
                log.warning(
                    "cannot use DistributedLock yet, retrying",
                    lock_ref=str(self.ref),
                    error=str(exc),
                    retry_in=delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def run(self) -> None:
        """Watch the object; re-read it (and its Secret) on every change and every ``resync``."""
        delay = 0.5
        while True:
            try:
                await self._apply(None)
                async for event in self.client.stream(lock_path(self.ref, watch=True), self.resync):
                    obj = event.get("object") or {}
                    if (obj.get("metadata") or {}).get("name") != self.ref.name:
                        continue
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        await self._apply(obj)
                delay = 0.5
            except TimeoutError:
                delay = 0.5
            except (KubeError, ConfigError) as exc:
                log.warning("DistributedLock not followed", lock_ref=str(self.ref), error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _apply(self, obj: dict[str, Any] | None) -> None:
        try:
            config = await self.read(obj)
        except ConfigError as exc:
            log.error("DistributedLock spec invalid, keeping the current settings", error=str(exc))
            return
        self.on_config(config)
