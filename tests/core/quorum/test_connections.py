"""Per-node connection options on real servers: ACL users and unix sockets (TLS: test_tls.py)."""

from __future__ import annotations

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
