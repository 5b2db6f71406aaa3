"""A redis-server that speaks TLS and requires client certificates, with a CA made by the test.

:func:`running` starts one (the ``tls_redis`` fixture of tests/conftest.py); its plain port stays
open for the test's own checks. The binary must serve TLS
(:func:`~redlease.devtools.tlsprobe.tls_unsupported` checks it with a handshake): otherwise the
fixture skips the test with its one line saying why.
"""

from __future__ import annotations

import base64
import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trustme

from redlease.devtools.localredis import RedisServer, TlsFiles
from redlease.kube.names import CREDENTIALS_LABEL


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


@contextlib.contextmanager
def running() -> Iterator[TlsRedis]:
    """A started :class:`TlsRedis` with fresh certificates, stopped on exit."""
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
    server = RedisServer(
        tls=TlsFiles(str(files["ca"]), str(files["server_cert"]), str(files["server_key"])),
        # mTLS: a client certificate from the CA is required (the last word wins)
        extra_args=["--tls-auth-clients", "yes"],
    ).start()
    try:
        yield TlsRedis(server, server.tls_port, ca, files, pem)
    finally:
        server.stop()
