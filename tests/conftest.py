"""Shared fixtures: real redis-server processes on free loopback ports (never 6379).

``redis_server`` is one fresh server per test; ``redis_cluster`` one 3-master cluster per session
(flushed before each test). Servers can be killed, paused (SIGSTOP), resumed and restarted
through :class:`redlease.devtools.localredis.RedisServer`. Everything is stopped at the end.

``cluster`` is the operator's handlers in kopf against KMock (tests/operator, tests/scenarios);
``tls_redis`` a redis-server that requires client certificates (skipped where the binary serves
no TLS). Both come from :mod:`redlease.devtools` and are imported when first used.

``--server=redis7|redis6|valkey8`` (or ``REDLEASE_SERVER``) runs the session on that server
flavour; the option sets the variable, so processes the tests start use the same servers.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest
import redis

from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.localredis import RedisServer
from redlease.devtools.redisbinary import (
    FLAVOURS,
    SERVER_ENV,
    ServerError,
    describe,
    find_redis_server,
)
from redlease.devtools.tlsprobe import tls_unsupported

if TYPE_CHECKING:
    from redlease.devtools.kubeemulator import Cluster
    from redlease.devtools.tlsredis import TlsRedis


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--server",
        choices=list(FLAVOURS),
        help=f"server flavour for every test (default: ${SERVER_ENV}, else redis-server on PATH)",
    )


def pytest_configure(config: pytest.Config) -> None:
    flavour = config.getoption("--server")
    if flavour:
        os.environ[SERVER_ENV] = flavour
    if os.environ.get(SERVER_ENV):  # asked for a flavour: it must exist, said in one line
        try:
            find_redis_server()
        except ServerError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config: pytest.Config) -> str:
    try:
        binary = describe(find_redis_server())
    except ServerError as exc:
        return f"server: none ({exc})"
    chosen = os.environ.get(SERVER_ENV)
    return f"server: {binary.label} ({binary.path})" + (
        f" [{SERVER_ENV}={chosen}]" if chosen else ""
    )


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_nodes(request: pytest.FixtureRequest) -> Iterator[list[RedisServer]]:
    """N independent servers (N via indirect parametrize; default 3)."""
    n = getattr(request, "param", 3)
    servers = [RedisServer().start() for _ in range(n)]
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="session")
def redis_cluster_session() -> Iterator[LocalCluster]:
    cluster = LocalCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster(redis_cluster_session: LocalCluster) -> LocalCluster:
    for s in redis_cluster_session.servers:
        c = s.client()
        c.flushall()
        c.close()
    return redis_cluster_session


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    c = redis_server.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    from redlease.devtools.kubeemulator import running_cluster

    async with running_cluster() as running:
        yield running


@pytest.fixture
def tls_redis() -> Iterator[TlsRedis]:
    pytest.importorskip("trustme", reason="TLS tests need the trustme package")
    why = tls_unsupported()
    if why is not None:
        pytest.skip(why)
    from redlease.devtools.tlsredis import running

    with running() as server:
        yield server
