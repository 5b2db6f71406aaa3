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
import contextlib
import threading
import time
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
    if found is None or found[0] != homes.FORKS:
        with _MAKE:
            found = state.get(_ATTR)
            if found is None or found[0] != homes.FORKS:
                found = (homes.FORKS, Gate())
                state[_ATTR] = found
    gate: Gate = found[1]
    if not gate.take(timeout):
        raise _stuck(timeout or 0.0)
    return gate


class AsyncGate:
    """:data:`GATE` slots of one pool for one event loop's tasks.

    A free slot is taken without awaiting (:meth:`take_now`: a count, no coroutine; an
    ``asyncio.BoundedSemaphore`` cost an uncontended request two coroutine frames and a
    ``locked()`` scan of its waiters, issue 39). A task that finds none free queues a future
    (:meth:`take`); a slot given back goes to the oldest waiter still waiting, and a waiter
    handed a slot but cancelled before it ran passes the slot on, so none is lost.
    """

    __slots__ = ("_free", "_waiters")

    def __init__(self, slots: int = GATE) -> None:
        self._free = slots
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def take_now(self) -> bool:
        """A slot if one is free and nobody queues for one (queued tasks go first)."""
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self, timeout: float | None) -> bool:
        """A slot, waiting at most ``timeout`` (None: for ever) in turn; False if none came."""
        if self.take_now():
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            return fut.done() and not fut.cancelled()  # handed a slot as the wait ended
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot, then cancelled: the slot goes on
            raise
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(fut)
        return True

    def release(self) -> None:
        """Give a slot back: to the oldest task still waiting, else to the free count."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1


def _agate(home: Any) -> AsyncGate:
    state = homes.state(home)
    loop = asyncio.get_running_loop()
    found = state.get(_ATTR)
    if found is None or found[0] is not loop:
        found = (loop, AsyncGate())
        state[_ATTR] = found
    gate: AsyncGate = found[1]
    return gate


def aenter_now(home: Any) -> AsyncGate | None:
    """A slot for one asyncio request if one is free now, taken without awaiting; None: wait
    for one with :func:`aenter`."""
    gate = _agate(home)
    return gate if gate.take_now() else None


async def aenter(home: Any, timeout: float | None) -> AsyncGate:
    """:func:`enter` for an asyncio request (one gate per pool or cluster node and event
    loop)."""
    gate = _agate(home)
    if not await gate.take(timeout):
        raise _stuck(timeout or 0.0)
    return gate
