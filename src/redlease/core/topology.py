"""A Redis Cluster client's slot map read again within the caller's deadline.

redis-py reads the slot map (``CLUSTER SLOTS``) with its own clients and settings: node after
node, each with the client's socket timeouts (5 s) and retries. Against a paused cluster the
blocking client's refresh after ``acquire(timeout=1)`` took 31 s, and the asyncio client's hung
(its first read, before any map, too). So the read runs beside the caller instead (a thread, or
a task on the caller's loop), one at a time per client: a caller waits for it at most its own
time left, then goes on with the map it has (its request's own error is what it reports); the
read goes on and serves the requests that come after it. A read that reached no node is not an
error here: the next request that finds the map stale asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import redis.exceptions as rex
from redis.exceptions import RedisClusterException

from redlease.core import homes

_ATTR = "_redlease_topology"
_MAKE = threading.Lock()


def refresh(owner: Any, read: Callable[[], Any], wait: float | None) -> bool:
    """Run ``read()`` (a slot-map read of ``owner``, a blocking cluster client's nodes manager)
    in a thread of its own, unless one runs already: then wait for that one. Wait at most
    ``wait`` seconds (None: until it ends); True if it ended by then."""
    state = homes.state(owner)
    with _MAKE:
        found = state.get(_ATTR)
        if found is None or found[0] != os.getpid() or found[1].done():
            job: Future[None] = Future()
            found = state[_ATTR] = (os.getpid(), job)
            threading.Thread(
                target=_run, args=(job, read), name="redlease-slot-map", daemon=True
            ).start()
    try:
        found[1].result(wait)
    except FutureTimeout:
        return False
    return True


def _run(job: Future[None], read: Callable[[], Any]) -> None:
    try:
        with contextlib.suppress(rex.RedisError, RedisClusterException):
            read()
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for it
        job.set_exception(exc)
    else:
        job.set_result(None)


async def arefresh(owner: Any, read: Callable[[], Awaitable[Any]], wait: float | None) -> bool:
    """:func:`refresh` for an asyncio cluster client (``read``: its ``initialize``, or its nodes
    manager's): a task on the running loop, one per client and loop."""
    state = homes.state(owner)
    loop = asyncio.get_running_loop()
    found = state.get(_ATTR)
    if found is None or found[0] is not loop or found[1].done():
        task = loop.create_task(_arun(read), name="redlease-slot-map")
        task.add_done_callback(_retrieved)
        found = state[_ATTR] = (loop, task)
    task = found[1]
    if wait is None:
        await asyncio.shield(task)
        return True
    done, _ = await asyncio.wait({task}, timeout=wait)
    if task in done:
        task.result()  # an error that is not a Redis one is the caller's
        return True
    return False


async def _arun(read: Callable[[], Awaitable[Any]]) -> None:
    with contextlib.suppress(rex.RedisError, RedisClusterException):
        await read()


def _retrieved(task: asyncio.Task[None]) -> None:
    """Mark the task's outcome as seen (nobody may be waiting for it any more)."""
    if not task.cancelled():
        task.exception()
