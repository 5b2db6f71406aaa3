"""Fixtures: a KMock emulator on a real HTTP port and the operator running against it in kopf."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import kopf
import kubernetes.client
import pytest
from dlock_harness import (
    NAMESPACE,
    REFRESH,
    Cluster,
    Emulator,
    KopfThread,
    declare,
    until,
    watching,
)

from redlease.operator.handlers import OperatorConfig, Runtime, build_registry
from redlease.operator.secrets import SecretSource


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with Emulator() as api, kmock.Server(api) as server:
        declare(api)
        url = str(server.url).rstrip("/")
        conf = kubernetes.client.Configuration(host=url)
        runtime = Runtime(
            OperatorConfig(namespaces=(NAMESPACE,), refresh=REFRESH, node_timeout=1.0),
            secrets=SecretSource(conf, ttl=0.0),
        )
        registry = build_registry(runtime, kopf.OperatorRegistry())  # fresh, no client login
        async with KopfThread(registry, url, NAMESPACE) as kopf_thread:
            await until(lambda: watching(api) or kopf_thread.error, what="kopf's watch")
            assert kopf_thread.error is None, kopf_thread.error
            yield Cluster(api, runtime, url)
