"""Fixtures for the RedLock tests: node sets over real redis-server processes."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

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


@pytest.fixture
def acl_node() -> Iterator[RedisServer]:
    """A server whose user ``locker`` (password ``s3cret-pw``) may touch only redlease keys."""
    server = RedisServer(
        extra_args=["--user", "locker", "on", ">s3cret-pw", "~redlease:*", "&*", "+@all"]
    ).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def unix_node() -> Iterator[str]:
    """The ``unix://`` URL of a server listening on a unix socket."""
    sock_dir = Path(tempfile.mkdtemp(prefix="redlease-sock-"))
    sock = sock_dir / "redis.sock"
    server = RedisServer(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"])
    server.start()
    try:
        yield f"unix://{sock}"
    finally:
        server.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


def round_trip_over(urls: list[str], name: str) -> None:
    """Connect to ``urls`` as a node set: lock, release, lock again with a higher token; every
    node must be healthy afterwards."""
    import redlease
    from redlease.core.connect import connect
    from redlease.quorum import NodeSet

    ns = connect(urls, socket_timeout=5)
    assert isinstance(ns, NodeSet)
    assert ns.names[-1].startswith("unix:") == urls[-1].startswith("unix:")
    lock = redlease.Lock(ns, name, ttl=5)
    first = lock.acquire(blocking=False)
    lock.release()
    assert lock.acquire(blocking=False).fencing_token > first.fencing_token
    lock.release()
    assert ns.health()["healthy"] == len(urls)
    ns.close()


def lease_keys(server: RedisServer, name: str) -> list[bytes]:
    """Keys on ``server`` that mean "somebody holds ``name``" (lease hash, readers)."""
    c = server.client()
    try:
        return [k for k in (f"redlease:{{{name}}}", f"redlease:{{{name}}}:readers") if c.exists(k)]  # type: ignore[misc]
    finally:
        c.close()
