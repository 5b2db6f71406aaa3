"""Fixtures for the RedLock tests: node sets over real redis-server processes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from redlease.devtools.localredis import RedisServer

_names = itertools.count()


@pytest.fixture
def lock_name() -> str:
    return f"q{next(_names)}"


@pytest.fixture
def durable_nodes(request: pytest.FixtureRequest) -> Iterator[list[RedisServer]]:
    """N servers with AOF + appendfsync always: a restart keeps every write (N via param)."""
    n = getattr(request, "param", 5)
    servers = [RedisServer(persistent=True).start() for _ in range(n)]
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def lease_keys(server: RedisServer, name: str) -> list[bytes]:
    """Keys on ``server`` that mean "somebody holds ``name``" (lease hash, readers)."""
    c = server.client()
    try:
        return [k for k in (f"redlease:{{{name}}}", f"redlease:{{{name}}}:readers") if c.exists(k)]  # type: ignore[misc]
    finally:
        c.close()
