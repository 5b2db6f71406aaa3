"""At most :data:`GATE` requests of one process in flight per connection pool (or cluster node).

redis-py opens a connection for every request sent while the others are busy and keeps it in
its pool afterwards: 200 tasks acquiring one lock at once left 200 connections open, and
redis-py's default asyncio pool (100) failed the rest. The single-node and cluster drivers
take a slot here before they check a connection out, so requests queue in the process instead
and connections per process stay bounded (the waiters' own path is :mod:`redlease.core.waiting`).
A slot is held for one exchange; a connection pinned for its owner (``client.Pins``) leaves the
gate. Waiting longer than the request's own timeout for a slot is a client-side limit
(redis-py's ``MaxConnectionsError``, mapped to :class:`redlease.errors.ConnectionLimit`).
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import redis.exceptions as rex

from redlease.core import homes

GATE = 4  # requests in flight per pool and process: a few round trips' worth of pipelining
_ATTR = "_redlease_gate"
_MAKE = threading.Lock()


def _stuck(timeout: float) -> rex.MaxConnectionsError:
    return rex.MaxConnectionsError(
        f"{GATE} requests in flight to this node from this process, none done within {timeout:g}s"
    )


def enter(home: Any, timeout: float | None) -> threading.Semaphore | None:
    """Take a slot for one blocking request (None: ``home`` cannot carry a gate)."""
    state = getattr(home, "__dict__", None)
    if state is None:
        return None
    found = state.get(_ATTR)
    if found is None or found[0] != os.getpid():
        with _MAKE:
            found = state.get(_ATTR)
            if found is None or found[0] != os.getpid():
                found = (os.getpid(), threading.BoundedSemaphore(GATE))
                state[_ATTR] = found
    gate: threading.Semaphore = found[1]
    if not gate.acquire(timeout=timeout):
        raise _stuck(timeout or 0.0)
    return gate


async def aenter(home: Any, timeout: float | None) -> asyncio.Semaphore:
    """:func:`enter` for an asyncio request (one gate per pool or cluster node and event
    loop)."""
    state = homes.state(home)
    loop = asyncio.get_running_loop()
    found = state.get(_ATTR)
    if found is None or found[0] is not loop:
        found = (loop, asyncio.BoundedSemaphore(GATE))
        state[_ATTR] = found
    gate: asyncio.Semaphore = found[1]
    if not gate.locked():
        await gate.acquire()  # no wait: a free slot is taken at once
        return gate
    try:
        async with asyncio.timeout(timeout):
            await gate.acquire()
    except TimeoutError:
        raise _stuck(timeout or 0.0) from None
    return gate
