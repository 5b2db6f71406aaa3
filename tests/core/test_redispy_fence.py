"""The redis-py internals redlease reaches into (core/redispy.py) are where it expects them, on
real objects of the locked redis-py connected to real servers (a release that renames or drops
one fails here, not in production), and nothing else in ``src/`` reaches into redis-py."""

from __future__ import annotations

import ast
import asyncio
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from redlease.core import redispy
from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.localredis import RedisServer
from redlease.devtools.localsentinel import SentinelDeployment
from redlease.devtools.polling import async_wait_until

SRC = Path(redispy.__file__).resolve().parents[1]  # src/redlease
FENCE = Path(redispy.__file__).resolve()
# every owner of redispy.INTERNALS, and the test below that checks its names on a real one
CHECKED = {
    "Connection": "test_blocking_connection, test_sentinel_connections, test_clusters",
    "parser": "test_blocking_connection",
    "asyncio Connection": "test_asyncio_connection, test_sentinel_connections, test_clusters",
    "asyncio parser": "test_asyncio_connection",
    "asyncio.StreamReader": "test_asyncio_connection",
    "asyncio RedisCluster": "test_clusters",
    "asyncio ClusterNode": "test_clusters",
}


def _has_internals(owner: str, obj: Any) -> None:
    """``obj`` has every name redlease takes from an ``owner`` (a key of :data:`CHECKED`)."""
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    for where, name in redispy.INTERNALS:
        if where == owner:
            assert hasattr(obj, name), f"{kind}.{name} is gone: update core/redispy.py"


def test_every_internal_is_checked_on_a_real_object() -> None:
    assert {owner for owner, _ in redispy.INTERNALS} == set(CHECKED)


def _blocking(conn: Any) -> None:
    """A connected blocking connection: its socket, its parser; no socket once dropped."""
    _has_internals("Connection", conn)
    assert isinstance(getattr(conn, redispy.SOCK), socket.socket)
    conn.disconnect()
    assert getattr(conn, redispy.SOCK) is None  # what "dropped" is to the drivers


async def _asyncio(conn: Any) -> None:
    """A connected asyncio connection: its stream writer and reader, its parser; no writer
    once dropped."""
    _has_internals("asyncio Connection", conn)
    assert isinstance(getattr(conn, redispy.WRITER), asyncio.StreamWriter)
    assert isinstance(getattr(conn, redispy.READER), asyncio.StreamReader)
    await conn.disconnect()
    assert getattr(conn, redispy.WRITER) is None


def test_blocking_connection(redis_server: RedisServer) -> None:
    client: Any = redis.Redis(host="127.0.0.1", port=redis_server.port)
    conn = client.connection_pool.get_connection()
    conn.send_command("PING")
    parser = getattr(conn, redispy.PARSER)
    _has_internals("parser", parser)
    assert redispy.read_within(conn, 1.0) == b"PONG"  # from the parser: raw
    _blocking(conn)
    client.close()


async def test_asyncio_connection(redis_server: RedisServer) -> None:
    client: Any = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    conn = await client.connection_pool.get_connection()
    parser = getattr(conn, redispy.PARSER)
    _has_internals("asyncio parser", parser)
    assert hasattr(getattr(parser, redispy.PARSER_READER), "has_data")  # hiredis's reader
    stream = getattr(conn, redispy.READER)
    _has_internals("asyncio.StreamReader", stream)
    await conn.send_command("PING")
    assert await redispy.aread(conn) == b"PONG"
    assert not getattr(stream, redispy.STREAM_BUFFER)  # redis-py parsed it all
    assert redispy.aunread(conn) is False  # clean: what can_read answers, without awaiting
    await conn.send_command("PING")

    async def buffered() -> bool:
        return bool(getattr(stream, redispy.STREAM_BUFFER))

    await async_wait_until(buffered)
    assert redispy.aunread(conn) is True and await conn.can_read()  # a reply nobody read
    assert await redispy.aread(conn) == b"PONG"
    assert redispy.hiredis_reader(conn, object()) is not None
    await _asyncio(conn)
    await client.aclose()


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelDeployment]:
    with SentinelDeployment(replicas=0, sentinels=1, quorum=1) as d:
        yield d


async def test_sentinel_connections(sentinels: SentinelDeployment) -> None:
    """A Sentinel-managed master's connections are redis-py's connections too."""
    hosts = [("127.0.0.1", s.port) for s in sentinels.sentinel_servers]
    client: Any = Sentinel(hosts).master_for(sentinels.service)
    _blocking(client.connection_pool.get_connection())
    client.close()
    aclient: Any = AsyncSentinel(hosts).master_for(sentinels.service)
    await _asyncio(await aclient.connection_pool.get_connection())
    await aclient.aclose()


@pytest.mark.cluster
async def test_clusters(redis_cluster: LocalCluster) -> None:
    """A blocking cluster's node connections are plain ones; an asyncio cluster says whether
    its slot map is due, and its nodes list every connection, the ones in use included."""
    sync: Any = redis_cluster.client()
    node = sync.get_node_from_key("k")
    assert isinstance(sync, RedisCluster)
    _blocking(node.redis_connection.connection_pool.get_connection())
    sync.close()
    host, port = redis_cluster.startup_nodes[0]
    client: Any = AsyncRedisCluster(host=host, port=port)
    _has_internals("asyncio RedisCluster", client)
    assert getattr(client, redispy.MAP_DUE) is True  # nothing read yet
    await client.initialize()
    assert getattr(client, redispy.MAP_DUE) is False
    anode = client.get_node_from_key("k")
    _has_internals("asyncio ClusterNode", anode)
    conn = anode.acquire_connection()
    assert any(c is conn for c in getattr(anode, redispy.NODE_CONNECTIONS))  # in use: listed
    await conn.connect()
    await _asyncio(conn)
    anode.release(conn)
    await client.aclose()


# --- nothing else in src/ reaches into redis-py ----------------------------------------------

_DEFINED = re.compile(r"\b(?:self|cls)\.(_[a-z]\w*)|\bdef (_[a-z]\w*)")


def _defined(paths: Iterator[Path]) -> set[str]:
    """The private names the sources at ``paths`` give their own objects."""
    return {a or b for p in paths for a, b in _DEFINED.findall(p.read_text())}


def _private_names() -> set[str]:
    """Names that, read off an object in ``src/``, are redis-py's private ones: those of
    core/redispy.py, and every private attribute or method redis-py gives its objects that
    redlease does not also give its own (those cannot be told apart without types)."""
    fenced = {name for _, name in redispy.INTERNALS if name.startswith("_")}
    theirs = _defined(Path(redis.__file__).parent.rglob("*.py"))
    return fenced | (theirs - _defined(SRC.rglob("*.py")))


def _is_redis(module: str) -> bool:
    return module.split(".")[0] in ("redis", "hiredis")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def violations(source: str, names: set[str]) -> list[str]:
    """Where ``source`` reads a private attribute of redis-py (one of ``names``, on anything but
    ``self`` or ``cls``; or as a string, for ``getattr``), imports a private redis-py module or
    name, or reads a private name off a redis-py module."""
    tree = ast.parse(source)
    found: list[str] = []
    modules: set[str] = set()  # local names bound to redis-py modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_redis(alias.name):
                    modules.add(alias.asname or alias.name.split(".")[0])
                    if any(map(_private, alias.name.split("."))):
                        found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and _is_redis(node.module):
            for alias in node.names:
                modules.add(alias.asname or alias.name)
                if any(map(_private, [*node.module.split("."), alias.name])):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if node.attr in names and not on_self:
                found.append(f"{node.lineno}: .{node.attr}")
            elif _private(node.attr) and isinstance(root, ast.Name) and root.id in modules:
                found.append(f"{node.lineno}: {root.id}...{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in names:
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_no_redis_py_internals_outside_the_fence() -> None:
    names = _private_names()
    found = {
        str(path.relative_to(SRC.parent)): hits
        for path in sorted(SRC.rglob("*.py"))
        if path != FENCE and (hits := violations(path.read_text(), names))
    }
    assert not found, f"redis-py internals outside core/redispy.py (name them there): {found}"


@pytest.mark.parametrize(
    "source",
    [
        "conn._sock.settimeout(1)",  # the forms src/ used before the fence
        "getattr(conn, '_writer', None)",
        "getattr(getattr(parser, '_reader', None), 'has_data')",
        "node._connections",
        "from redis._parsers import _HiredisParser",
        "import redis._parsers.hiredis",
        "from redis.connection import _RESP3Parser",
        "import redis\nredis._parsers",
        "from redis import asyncio as a\na.connection._x",
        "client._available_connections",  # a redis-py private the fence does not name
    ],
)
def test_the_fence_check_finds(source: str) -> None:
    assert violations(source, _private_names())


@pytest.mark.parametrize(
    "source",
    [
        "self._sock",
        "cls._parser",
        "ch._conn",  # redlease's own names, also redis-py's: not told apart
        "conn._redlease_lent",
        "getattr(conn, redispy.SOCK)",
        "x.__dict__",
        "import redis.asyncio\nredis.asyncio.Redis",
    ],
)
def test_the_fence_check_passes(source: str) -> None:
    assert not violations(source, _private_names())
