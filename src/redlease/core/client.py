"""What redlease needs to know about a redis-py client: its name for errors, and error mapping.

This is the one place where redis-py exceptions become redlease exceptions.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions as rex

from redlease.errors import LockError, LockUnavailable, ProtocolError


class NodeBase:
    """What the sync and asyncio node drivers share: the client, its name, error mapping."""

    def __init__(self, client: Any, lock: str) -> None:
        self.client = client
        self.lock = lock
        self.name = describe(client)
        self.socket_timeout = socket_timeout(client)
        self.cluster = not hasattr(client, "connection_pool")

    def error(self, exc: rex.RedisError) -> BaseException:
        """The redlease exception to raise for a redis-py error on this node."""
        mapped = translate(exc, self.lock, self.name)
        return exc if mapped is None else mapped


def describe(client: Any) -> str:
    """A short, secret-free name for the node(s) behind ``client`` (``host:port`` or a path)."""
    nodes = getattr(client, "get_nodes", None)
    if callable(nodes) and not hasattr(client, "connection_pool"):
        try:
            names = sorted(f"{n.host}:{n.port}" for n in nodes())
        except Exception:  # noqa: BLE001 - a name for an error message must never fail
            names = []
        return "cluster " + ",".join(names) if names else "cluster"
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return type(client).__name__
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def socket_timeout(client: Any) -> float | None:
    """The client's socket timeout, which bounds how long one BLPOP may block."""
    try:
        value = client.connection_pool.connection_kwargs.get("socket_timeout")
    except AttributeError:
        value = getattr(client, "socket_timeout", None)
    return float(value) if value else None


def translate(exc: BaseException, lock: str, node: str) -> LockError | None:
    """Map a redis-py exception to the redlease tree (``None``: not a Redis error)."""
    if isinstance(exc, LockError):
        return exc
    if isinstance(exc, rex.AuthenticationError | rex.AuthenticationWrongNumberOfArgsError):
        return LockUnavailable(
            lock, "authentication failed (check user and password)", nodes=[node]
        )
    if isinstance(exc, rex.NoPermissionError):
        return LockUnavailable(lock, f"permission denied by ACL: {exc}", nodes=[node])
    if isinstance(exc, rex.TimeoutError):
        return LockUnavailable(lock, "Redis did not answer in time", nodes=[node])
    if isinstance(exc, rex.ConnectionError):
        return LockUnavailable(lock, f"cannot reach Redis: {_short(exc)}", nodes=[node])
    if isinstance(exc, rex.ReadOnlyError):
        return LockUnavailable(lock, "node is a read-only replica", nodes=[node])
    if isinstance(exc, rex.ClusterError | rex.ClusterDownError | rex.TryAgainError):
        return LockUnavailable(lock, f"cluster unavailable: {_short(exc)}", nodes=[node])
    if isinstance(exc, rex.ResponseError):
        text = _short(exc)
        if text.startswith("WRONGTYPE") or "WRONGTYPE" in text:
            return ProtocolError(
                lock, "a lock key holds a value of another type (name clash?)", nodes=[node]
            )
        if "BUSY" in text or "LOADING" in text or "MASTERDOWN" in text:
            return LockUnavailable(lock, f"node busy: {text}", nodes=[node])
        return ProtocolError(lock, f"Redis error: {text}", nodes=[node])
    if isinstance(exc, rex.RedisError):
        return LockUnavailable(lock, f"Redis error: {_short(exc)}", nodes=[node])
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
