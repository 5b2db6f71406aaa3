"""Connections of an asyncio cluster node lent to a request of ours, out of reach of a reset.

redis-py's asyncio ``RedisCluster`` before 8.2 closes every connection of every node
(``aclose``) on a ``CLUSTERDOWN`` reply and on every ``reinitialize_steps``-th ``MOVED`` (5 by
default, counted over the client's lifetime, the user's own commands included; 8.2 patches the
slot and keeps the connections, and a user's own ``aclose`` still does it): the requests other
tasks are reading replies from on healthy nodes (a lock's extend, the waiters' ``BLPOP``) would
fail with "Connection closed by server" and be reported as an outage. While lent, a connection's
place in the node's list (``ClusterNode._connections``, which such a close walks, and which
counts towards ``max_connections``) holds a stand-in: a close there only notes it, and the
connection is closed when the request gives it back, its reply read (what redis-py does itself
with the connections in use on a topology refresh).
"""

from __future__ import annotations

import contextlib
from typing import Any

from redlease.core import redispy


class Lent:
    """Stands in a cluster node's connection list for connection ``conn``, lent to a request."""

    __slots__ = ("closed", "conn")

    is_connected = False  # nothing of the node's to close here (ClusterNode.__del__ asks)

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.closed = False  # the client closed its connections meanwhile

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self.closed = True

    def __getattr__(self, name: str) -> Any:  # anything else (marks, counts) is the connection's
        return getattr(self.conn, name)


def lend(node: Any, conn: Any) -> None:
    """Put a stand-in in ``conn``'s place in ``node``'s connection list (if it has one)."""
    conns = getattr(node, redispy.NODE_CONNECTIONS, None)
    if not isinstance(conns, list):
        return
    try:
        i = conns.index(conn)  # by identity: connections do not compare by value
    except ValueError:
        return
    conns[i] = conn._redlease_lent = Lent(conn)


async def take_back(node: Any, conn: Any) -> None:
    """Put ``conn`` back in its place in ``node``'s list; close it if the client closed its
    connections while it was lent (it connects again when next used)."""
    lent = conn.__dict__.pop("_redlease_lent", None)
    if lent is None:
        return
    conns = getattr(node, redispy.NODE_CONNECTIONS, [])
    with contextlib.suppress(ValueError):
        conns[conns.index(lent)] = conn
    if lent.closed:
        await conn.disconnect()
