"""Clients for the behaviour suite: every test using ``any_client``/``any_aclient`` runs on a
single redis-server and on the 3-master Redis Cluster."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.localredis import RedisServer

_names = itertools.count()


@pytest.fixture
def lock_name(request: pytest.FixtureRequest) -> str:
    """A lock name unique to this test (cluster state is shared across tests)."""
    return f"t{next(_names)}-{request.node.name[:40]}".replace("[", "-").replace("]", "")


@pytest.fixture(params=["single", "cluster"])
def any_client(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "single":
        server: RedisServer = request.getfixturevalue("redis_server")
        client: Any = server.client()
    else:
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        client = cluster.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(params=["single", "cluster"])
async def any_aclient(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "single":
        server: RedisServer = request.getfixturevalue("redis_server")
        client: Any = aioredis.Redis(host="127.0.0.1", port=server.port)
    else:
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        host, port = cluster.startup_nodes[0]
        client = AsyncRedisCluster(host=host, port=port)
    try:
        yield client
    finally:
        await client.aclose()
