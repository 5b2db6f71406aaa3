"""Shared fixtures: real redis-server processes on free loopback ports (never 6379).

``redis_server`` is one fresh server per test; ``redis_cluster`` one 3-master cluster per session
(flushed before each test). Servers can be killed, paused (SIGSTOP), resumed and restarted
through :class:`redlease.devtools.localredis.RedisServer`. Everything is stopped at the end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from redlease.devtools.localredis import LocalCluster, RedisServer


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
