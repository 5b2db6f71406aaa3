"""The one asyncio Kubernetes API client: authenticated JSON requests and watches, on aiohttp.

Only a few calls are needed (a pod's label, a DistributedLock and its Secrets, a Lease,
Events), so this talks to the API directly instead of pulling in a full client. Where the API
is and how to authenticate come from a :class:`KubeAuth`, asked again for every request (bound
service-account tokens rotate, exec credentials expire; credentials that must be loaded first
are asked for from a worker thread, never on the loop), and told about every 401 (it then
loads its credentials again): a :class:`~redlease.kube.auth.ClusterAuth` (in-cluster, or the
sidecar's ``--kube-api``: tests, ``kubectl proxy``) or the operator's kubeconfig login
(:class:`~redlease.kube.credentials.KubeconfigAuth`, the one kopf logs in with too).

One attempt per call, bounded by its ``timeout`` (connecting included): the caller decides
whether to try again. One client may serve several event loops (the operator runs kopf in
threads): each loop gets its own connection pool, closed by :meth:`KubeClient.close` on it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any, Protocol

import aiohttp

from redlease.errors import KubeError

TIMEOUT = 10.0  # seconds for one call (connecting included) unless the caller says otherwise


class KubeAuth(Protocol):
    """Where the API server is, how to reach it and who is calling."""

    def base_url(self) -> str:
        """The API server's URL; a :class:`ConfigError` if there is none or it is refused."""
        ...

    def credentials(self) -> dict[str, str]:
        """The headers that authenticate a request (asked again for every request). May block
        (a kubeconfig's exec plugin runs): the client asks from a worker thread."""
        ...

    def cached_credentials(self) -> dict[str, str] | None:
        """The headers if they are at hand without blocking (the client's call on its event
        loop); None: ask :meth:`credentials` from a worker thread."""
        ...

    def ssl_context(self) -> ssl.SSLContext | bool:
        """TLS for the connections (False: plain HTTP)."""
        ...

    def user_agent(self) -> str:
        """Who is calling, in the API server's audit log (as client-go's user agent says it)."""
        ...

    def rejected(self) -> None:
        """The API server answered 401 Unauthorized (the credentials expired or were revoked:
        the next :meth:`credentials` may load new ones; the caller decides whether to retry)."""
        ...


class KubeClient:
    """Authenticated JSON requests to the API server (see the module docstring)."""

    def __init__(self, auth: KubeAuth) -> None:
        self.auth = auth
        self.base = auth.base_url()
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

    async def _headers(self) -> dict[str, str]:
        """A request's headers. Credentials that must be loaded first (an exec plugin, which
        may take seconds) are asked for from a worker thread: the loop, and what else it runs
        (the operator's Lease renewal), goes on meanwhile."""
        headers = {"Accept": "application/json", "User-Agent": self.auth.user_agent()}
        credentials = self.auth.cached_credentials()
        if credentials is None:
            credentials = await asyncio.to_thread(self.auth.credentials)
        headers.update(credentials)
        return headers

    def session(self) -> aiohttp.ClientSession:
        """The running loop's connection pool (made on first use)."""
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            for gone in [lp for lp in self._sessions if lp.is_closed()]:
                del self._sessions[gone]
            connector = aiohttp.TCPConnector(ssl=self.auth.ssl_context())
            session = self._sessions[loop] = aiohttp.ClientSession(connector=connector)
        return session

    async def close(self) -> None:
        """Close the running loop's connection pool."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = TIMEOUT,
    ) -> Any:
        """One call of ``method`` on ``path`` (built by :mod:`redlease.kube.paths`; the calls
        are :mod:`redlease.kube.verbs`): its JSON answer, or a :class:`KubeError`."""
        headers = await self._headers()
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
                if resp.status == 401:
                    self.auth.rejected()
                if resp.status >= 400:
                    reason = f"HTTP {resp.status}: {_reason(text)}"
                    raise KubeError(f"{method} {path}: {reason}", resp.status, reason)
                return json.loads(text) if text else None
        except TimeoutError:
            reason = f"no answer within {timeout:g}s"
            raise KubeError(f"{method} {path}: {reason}", None, reason) from None
        except (aiohttp.ClientError, json.JSONDecodeError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise KubeError(f"{method} {path}: {reason}", None, reason) from None

    async def stream(self, path: str, timeout: float) -> AsyncIterator[dict[str, Any]]:
        """Watch events of ``path`` (``?watch=true`` already in it) for at most ``timeout``,
        then :class:`TimeoutError`. Only the reads are bounded: a deadline around the
        ``yield`` would fire in the reader's own code when it passes while the reader handles
        an event, and cancel the reader's task instead (the sidecar then stopped following its
        DistributedLock for good)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            async with self.session().get(
                self.base + path,
                headers=await self._headers(),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout),
            ) as resp:
                if resp.status == 401:
                    self.auth.rejected()
                if resp.status >= 400:
                    raise KubeError(
                        f"watch {path}: HTTP {resp.status}: {_reason(await resp.text())}"
                    )
                while line := await asyncio.wait_for(
                    resp.content.readline(), max(0.0, deadline - loop.time())
                ):
                    if line.strip():
                        yield json.loads(line)
        except (aiohttp.ClientError, json.JSONDecodeError) as exc:
            raise KubeError(f"watch {path}: {type(exc).__name__}: {exc}") from None


def _reason(text: str) -> str:
    try:
        return str(json.loads(text).get("message", ""))[:200]
    except (ValueError, AttributeError):
        return text[:200]
