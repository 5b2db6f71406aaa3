"""Per-node connection options on real servers: ACL users and unix sockets (TLS: test_tls.py)."""

from __future__ import annotations

import socket

import pytest

import redlease
from redlease import QuorumUnavailable
from redlease.devtools.localredis import RedisServer
from redlease.quorum import NodeSet
from tests.core.quorum.conftest import round_trip_over


def test_acl_and_unix_nodes(
    acl_node: RedisServer, unix_node: str, redis_server: RedisServer
) -> None:
    # three nodes: the node-set rule refuses two (no fault tolerance)
    urls = [f"redis://locker:s3cret-pw@127.0.0.1:{acl_node.port}/0", redis_server.url, unix_node]
    round_trip_over(urls, "acl-unix")


def test_wrong_password_names_the_node(acl_node: RedisServer) -> None:
    port = acl_node.port
    ns = NodeSet.from_urls([f"redis://locker:wrong-pw@127.0.0.1:{port}/0"], socket_timeout=5)
    lock = redlease.Lock(ns, "acl-check", ttl=5)
    with pytest.raises(QuorumUnavailable) as info:
        lock.acquire(blocking=False)
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "wrong-pw" not in text
    assert "authentication failed" in text or "WRONGPASS" in text
    ns.close()


def test_a_node_still_connecting_at_the_deadline_is_not_called_unreachable(
    redis_server: RedisServer,
) -> None:
    """Two nodes that take the TCP connection but never answer the handshake: an acquire
    whose deadline comes first names them as not answered yet, not as unreachable (which sends
    an operator looking for a network fault where there is a slow or hung server)."""
    holes = [socket.socket() for _ in range(2)]
    try:
        for hole in holes:
            hole.bind(("127.0.0.1", 0))
            hole.listen(8)  # connects complete in the kernel; nothing is ever read
        urls = [redis_server.url, *(f"redis://127.0.0.1:{h.getsockname()[1]}" for h in holes)]
        ns = NodeSet.from_urls(urls, socket_timeout=5)
        lock = redlease.Lock(ns, "still-connecting", ttl=5)
        with pytest.raises(QuorumUnavailable) as info:
            lock.acquire(timeout=0.2)
        text = str(info.value)
        assert "not reachable" not in text
        for hole in holes:
            assert f"127.0.0.1:{hole.getsockname()[1]}: no answer yet" in text, text
        ns.close()
    finally:
        for hole in holes:
            hole.close()
