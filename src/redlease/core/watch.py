"""Deadlines of asyncio reply waits, watched by one timer per event loop.

Every request of the asyncio driver waits for its reply at most its bound
(:class:`~redlease.core.timing.Budget`). With ``asyncio.timeout`` around each read, an
uncontended acquire+release pair made two timer handles, two heap pushes, two cancellations
and four coroutine frames of ``Timeout`` plumbing: 8 us of the 44 us the client spent between a
reply and its next request (issue 39, measured on the 2-core machine of ``make bench``), all
for a timer that almost never fires. Here a wait is an entry in a set (:meth:`Watchdog.arm`,
:meth:`Watch.close`) and the loop has one timer, at the earliest deadline it knows of:
a later deadline leaves it as it is, and when it fires it expires what is due and sets itself
again at the earliest deadline left. Requests made one after another with the same bound
therefore cost no timer at all: the one timer fires about once per bound.

Expiry cancels the waiting task, as ``asyncio.timeout`` does, and :func:`timed_out` tells that
cancellation from any other (the task's cancel request withdrawn with ``uncancel``), so a
caller's own cancellation still propagates.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable
from typing import Any


class Watch:
    """One armed deadline: ``callback(arg)`` runs once if it passes before :meth:`close`."""

    __slots__ = ("arg", "callback", "cancelling", "deadline", "dog", "fired")

    def __init__(
        self, dog: Watchdog, deadline: float, callback: Callable[[Any], object], arg: Any
    ) -> None:
        self.dog = dog
        self.deadline = deadline
        self.callback = callback
        self.arg = arg
        self.fired = False
        self.cancelling = 0

    def close(self) -> None:
        """The wait is over (the loop's timer, if set for it, fires and finds nothing due)."""
        self.dog._live.discard(self)


class Watchdog:
    """The watched deadlines of one event loop (``loop.time()`` clock) and its one timer. The
    loop is held weakly: a watchdog kept beside its loop must not keep it alive."""

    __slots__ = ("_at", "_live", "_loop", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self._live: set[Watch] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._at = math.inf

    def arm(self, deadline: float, callback: Callable[[Any], object], arg: Any) -> Watch:
        """Run ``callback(arg)`` at ``deadline`` (loop time) unless closed before."""
        watch = Watch(self, deadline, callback, arg)
        self._live.add(watch)
        if deadline < self._at:
            self._schedule(deadline)
        return watch

    def _schedule(self, at: float) -> None:
        loop = self._loop()
        if loop is None:  # pragma: no cover - a loop gone has no waits left
            return
        if self._timer is not None:
            self._timer.cancel()
        self._at = at
        self._timer = loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._at = math.inf
        loop = self._loop()
        if loop is None:  # pragma: no cover
            return
        now = loop.time()
        due = [w for w in self._live if w.deadline <= now]
        for watch in due:
            self._live.discard(watch)
            watch.fired = True
        for watch in due:
            watch.callback(watch.arg)
        if self._live:
            self._schedule(min(w.deadline for w in self._live))


_ATTR = "_redlease_watchdog"
_DOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Watchdog] = weakref.WeakKeyDictionary()


def watchdog(loop: asyncio.AbstractEventLoop) -> Watchdog:
    """The :class:`Watchdog` of ``loop``: kept in the loop's own ``__dict__`` (it lives and dies
    with the loop), or beside it for a loop that has none."""
    state: dict[str, Any] | None = getattr(loop, "__dict__", None)
    if state is None:
        dog = _DOGS.get(loop)
        if dog is None:
            dog = _DOGS[loop] = Watchdog(loop)
        return dog
    found: Watchdog | None = state.get(_ATTR)
    if found is None:
        found = state[_ATTR] = Watchdog(loop)
    return found


def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()


def bound_task(seconds: float) -> Watch:
    """Cancel the current task if it is still waiting ``seconds`` from now; :func:`timed_out`
    after its ``CancelledError``, :meth:`Watch.close` when the wait is over (``finally``)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task(loop)
    if task is None:  # pragma: no cover - the drivers run in tasks
        raise RuntimeError("a reply deadline needs a running task")
    watch = watchdog(loop).arm(loop.time() + seconds, _cancel, task)
    watch.cancelling = task.cancelling()
    return watch


def timed_out(watch: Watch) -> bool:
    """After a ``CancelledError`` in the wait ``watch`` bounds: whether the deadline caused it
    (then the cancel request is withdrawn and the caller raises its timeout instead); False
    for a cancellation from elsewhere, which must propagate."""
    if not watch.fired:
        return False
    task: asyncio.Task[Any] = watch.arg
    return task.uncancel() <= watch.cancelling
