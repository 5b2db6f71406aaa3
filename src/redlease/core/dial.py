"""A new connection made within a deadline, with a pool's settings but not lent by the pool.

redis-py's pool connects with the client's retries (redis-py 8: 10, with back-off) and socket
timeouts (5 s): 53 s for one acquire against a paused server. A connection made here is
connected and greeted in one attempt with every socket wait within the caller's time, then
given the client's own socket timeout again. Used by :mod:`redlease.core.idle` (a request's
connection when none is kept) and :mod:`redlease.core.masters` (a Sentinel asked for its
master); the caller owns it: keeps it or closes it, never gives it to the pool
(:func:`made_here` tells them apart).
"""

from __future__ import annotations

import weakref
from typing import Any

from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlease.core import redispy

Address = tuple[str, int]

_OWN: weakref.WeakSet[Any] = weakref.WeakSet()  # the connections made here, not by a pool


def made_here(conn: Any) -> bool:
    """Whether ``conn`` was made by :func:`connect` / :func:`aconnect` (not lent by a pool)."""
    return conn in _OWN


def connect(pool: Any, timeout: float, address: Address | None = None) -> Any:
    """A connection with ``pool``'s connection class and arguments (TLS, credentials),
    connected to its host (or to ``address``: a Sentinel-managed pool's master, looked up by
    the caller) with the connect and the handshake within ``timeout``."""
    conn = pool.connection_class(**pool.connection_kwargs)
    _OWN.add(conn)
    saved = conn.retry, conn.socket_connect_timeout, conn.socket_timeout
    conn.retry = Retry(NoBackoff(), 0)
    conn.socket_connect_timeout = min(saved[1] or timeout, timeout)
    conn.socket_timeout = min(saved[2] or timeout, timeout)
    try:
        if address is None:
            conn.connect()
        else:
            conn.connect_to(address)
    finally:
        conn.retry, conn.socket_connect_timeout, conn.socket_timeout = saved
    sock = getattr(conn, redispy.SOCK, None)
    if sock is not None:
        sock.settimeout(saved[2])
    return conn


async def aconnect(pool: Any, timeout: float, address: Address | None = None) -> Any:
    """:func:`connect` for a ``redis.asyncio`` pool."""
    conn = pool.connection_class(**pool.connection_kwargs)
    _OWN.add(conn)
    saved = conn.retry, conn.socket_connect_timeout, conn.socket_timeout
    conn.retry = AsyncRetry(NoBackoff(), 0)
    conn.socket_connect_timeout = min(saved[1] or timeout, timeout)
    conn.socket_timeout = min(saved[2] or timeout, timeout)
    try:
        if address is None:
            await conn.connect()
        else:
            await conn.connect_to(address)
    finally:
        conn.retry, conn.socket_connect_timeout, conn.socket_timeout = saved
    return conn
