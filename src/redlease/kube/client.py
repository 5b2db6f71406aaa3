"""The one asyncio Kubernetes API client: authenticated JSON requests and watches, on aiohttp.

Only a few calls are needed (a pod's label, a DistributedLock and its Secrets, a Lease,
Events), so this talks to the API directly instead of pulling in a full client. In a pod it
uses the service-account token (read again on every request: bound tokens rotate) and CA
(in-cluster config); ``--kube-api`` points it elsewhere (tests, ``kubectl proxy``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from redlease import __version__
from redlease.errors import ConfigError, KubeError


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """How to reach the Kubernetes API (in-cluster by default) and who this pod is."""

    api: str | None = None  # https://HOST:PORT; None: not running in a cluster
    token_file: Path | None = None
    ca_file: Path | None = None
    pod_name: str | None = None
    namespace: str | None = None


class KubeClient:
    """Authenticated JSON requests to the API server; ``agent`` names the caller in the API
    server's audit log."""

    def __init__(self, settings: KubeSettings, agent: str = "redlease-sidecar") -> None:
        if not settings.api:
            raise ConfigError(
                "--kube-api",
                "no Kubernetes API: not in a cluster (KUBERNETES_SERVICE_HOST unset)",
            )
        self.send_token = check_api_url(settings.api)
        self.settings = settings
        self.agent = agent
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
        agent = f"{self.agent}/{__version__} ({self.settings.pod_name or 'unknown pod'})"
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
