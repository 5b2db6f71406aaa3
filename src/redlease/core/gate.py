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
import collections
import os
import threading
import time
from typing import Any

import redis.exceptions as rex

from redlease.core import homes

GATE = 4  # requests in flight per pool and process: a few round trips' worth of pipelining
_ATTR = "_redlease_gate"
_MAKE = threading.Lock()
_FORKS = 0  # forks this process descends from: a gate made before a fork is not the child's


def _forked() -> None:
    global _FORKS
    _FORKS += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _stuck(timeout: float) -> rex.MaxConnectionsError:
    return rex.MaxConnectionsError(
        f"{GATE} requests in flight to this node from this process, none done within {timeout:g}s"
    )


class Gate:
    """:data:`GATE` slots of one pool for the blocking drivers' threads.

    The slots are tokens in a deque: taking one when one is free is a ``pop`` and giving it back
    an ``append`` (atomic in CPython), with no Python-level lock on the way. An uncontended
    request used to pay a ``threading.BoundedSemaphore`` (a Condition, eight Python calls per
    request) and a ``getpid`` system call: a tenth of an uncontended pair's client calls (issue
    39). Only a thread that finds none free takes the condition and waits; a giver notifies
    only while someone waits. No wake-up is lost: a waiter counts itself in and retries the
    ``pop`` under the condition, so a giver that saw no waiter gave back before that ``pop``.
    """

    __slots__ = ("_cond", "_free", "_waiting")

    def __init__(self, slots: int = GATE) -> None:
        self._free: collections.deque[int] = collections.deque(range(slots))
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0

    def take(self, timeout: float | None) -> bool:
        """A slot, waiting at most ``timeout`` (None: for ever) for one; False if none came."""
        try:
            self._free.pop()
            return True
        except IndexError:
            pass
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    try:
                        self._free.pop()
                        return True
                    except IndexError:
                        pass
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left)
            finally:
                self._waiting -= 1

    def release(self) -> None:
        """Give a slot back (and wake one waiting thread, if any)."""
        self._free.append(0)
        if self._waiting:
            with self._cond:
                self._cond.notify()


def enter(home: Any, timeout: float | None) -> Gate | None:
    """Take a slot for one blocking request (None: ``home`` cannot carry a gate)."""
    state = getattr(home, "__dict__", None)
    if state is None:
        return None
    found = state.get(_ATTR)
    if found is None or found[0] != _FORKS:
        with _MAKE:
            found = state.get(_ATTR)
            if found is None or found[0] != _FORKS:
                found = (_FORKS, Gate())
                state[_ATTR] = found
    gate: Gate = found[1]
    if not gate.take(timeout):
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
