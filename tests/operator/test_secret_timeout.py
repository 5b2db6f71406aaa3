"""The operator's Secret GET gives up within its timeout: an API server on loopback that
accepts the request and never answers costs one timeout and fails with one clear error naming
the spec field (one attempt: a client that retried would have made it several times as long)."""

from __future__ import annotations

import asyncio
import time

import pytest

from redlease.errors import ConfigError
from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient
from redlease.kube.secretspec import SecretRef
from redlease.operator.secrets import SecretSource


class Silent:
    """A TCP server on loopback that records each request's first line and never answers."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> Silent:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._held.append(writer)
        line = await reader.readline()
        self.requests.append(line.decode(errors="replace").strip())

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._held:
            writer.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def test_secret_get_gives_up_within_its_timeout() -> None:
    async with Silent() as api:
        source = SecretSource(KubeClient(ClusterAuth(api.url)), ttl=0.0, timeout=1.0)
        started = time.monotonic()
        with pytest.raises(ConfigError) as info:
            await source.secret("apps", SecretRef("redis-creds"))
        elapsed = time.monotonic() - started
    assert info.value.field == "spec.auth.secretRef.name"
    assert info.value.message == "cannot read Secret apps/redis-creds: no answer within 1s"
    assert api.requests == ["GET /api/v1/namespaces/apps/secrets/redis-creds HTTP/1.1"]
    assert api.connections == 1  # one attempt, no retries
    assert 1.0 <= elapsed < 3.0  # one attempt, bounded by its timeout
