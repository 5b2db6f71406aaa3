"""The numbers of a guarded HTTP port (pure; :mod:`redlease.serving.httpguard`): its connection
cap within the process's descriptor limit, the descriptors a port holds at its worst, the
timeouts, and how many requests may be parked at once."""

from __future__ import annotations

import resource

MAX_CONNECTIONS = 256  # more than probes, scrapers and the API server need; see connection_cap
REQUEST_TIMEOUT = 5.0  # a connection gets this long for each complete request (header + idle)
FD_RESERVE = 64  # descriptors kept for Redis, the Kubernetes API, state-file writes, logging
BACKLOG = 4  # asyncio accepts up to this many sockets at once (per loop pass) on a port
# Descriptors a port holds beyond its cap while a flood is accepted, from asyncio's accept
# path: a pass accepts BACKLOG sockets; the next pass makes their transports; the one after
# admits them (connection_made), evicting as many idle connections, whose sockets close a pass
# later. So two batches not yet admitted and one evicted, not yet closed: cap + 3 * BACKLOG
# (measured: 48 + 32 + 16 = 96 sockets on a port of cap 48 when BACKLOG was 16).
IN_FLIGHT = 3 * BACKLOG
LISTEN_QUEUE = 1024  # the kernel's queue of connected, not yet accepted sockets (no descriptors)
BODY_TIMEOUT = REQUEST_TIMEOUT  # a request's body must arrive within this long of its headers


def connection_cap(wanted: int, share: int = 1) -> int:
    """``wanted``, but low enough for the soft descriptor limit (:func:`cap_within`)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return cap_within(soft, wanted, share)


def cap_within(limit: int, wanted: int, share: int = 1) -> int:
    """The cap of each of ``share`` ports of a process with ``limit`` descriptors: ``wanted``,
    but low enough that every port at its worst (:func:`port_descriptors`) and
    :data:`FD_RESERVE` fit in ``limit``."""
    return max(8, min(wanted, (limit - FD_RESERVE) // max(1, share) - IN_FLIGHT))


def port_descriptors(cap: int) -> int:
    """The most descriptors a port of ``cap`` connections holds: the cap and
    :data:`IN_FLIGHT`."""
    return cap + IN_FLIGHT


def park_cap(cap: int) -> int:
    """How many requests may be parked at once on a port of ``cap`` connections: half."""
    return max(1, cap // 2)


__all__ = [
    "BACKLOG",
    "BODY_TIMEOUT",
    "FD_RESERVE",
    "IN_FLIGHT",
    "LISTEN_QUEUE",
    "MAX_CONNECTIONS",
    "REQUEST_TIMEOUT",
    "cap_within",
    "connection_cap",
    "park_cap",
    "port_descriptors",
]
