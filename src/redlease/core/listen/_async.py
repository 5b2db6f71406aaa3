"""The listener of an asyncio client's waiters on one lock (a task): one BLPOP in flight for
all of them, each served from :class:`~redlease.core.waiting.WaitList`; ``node`` is the
:class:`~redlease.core._async.AsyncNode` (or a RedLock set's wait node) it listens and gives up
through."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from redlease.core import driving, waiting
from redlease.core.requests import Wait


class Listener:
    """The one listener (a task) of a client's waiters on one lock's wake keys in this process
    and event loop: waiters await futures, the task keeps one BLPOP in flight for all of them
    and serves them from :class:`~redlease.core.waiting.WaitList`; it ends when nobody waits
    (cancelled, dropping its connection, when the last waiter gives up)."""

    def __init__(
        self,
        node: Any,
        req: Wait,
        loop: asyncio.AbstractEventLoop,
        registry: dict[Any, Listener],
    ) -> None:
        self.node = node
        self.loop = loop
        self.waiters = waiting.WaitList(req.keys, req.grants)
        self.registry = registry  # the client's listeners: this one leaves it when done
        self.key = node.listen_key(req)  # its key in ``registry``
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None  # at the next deadline it gives up for
        self.giving_up: asyncio.Task[None] | None = None  # the reader of due waiters' lease

    async def wait(self, req: Wait) -> Any:
        signal = self.loop.create_future()
        waiter = self.waiters.join(req, self.loop.time(), signal)
        if self.task is None:
            self.task = self.loop.create_task(self._run())
        try:
            if req.lease:  # resolved by the listener, at the latest at its deadline
                if self.giving_up is None and (
                    self.timer is None or waiter.deadline < self.timer.when()
                ):
                    self._arm()
                await signal
            else:
                async with asyncio.timeout(req.timeout):
                    await signal
        except TimeoutError:
            pass  # served meanwhile or not: ``waiter`` says
        finally:
            if self.waiters.leave(waiter):
                self._idle()
        if waiter.error is not None:
            raise waiter.error
        return waiter.reply if waiter.done else False

    def _idle(self) -> None:
        """Stop listening once nobody waits."""
        if not self.waiters and self.task is not None:
            self.task.cancel()
            self.task = None

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        when = self.waiters.next_due()
        self.timer = None if when is None else self.loop.call_at(when, self._due)

    def _due(self) -> None:
        """Give up for the waiters whose deadline has passed (one reader at a time: those due
        meanwhile go with the next read)."""
        self.timer = None
        if self.giving_up is None:
            self.giving_up = self.loop.create_task(self._give_up())

    async def _give_up(self) -> None:
        """While waiters are due: read the lease's owner (sent after all their deadlines, by the
        GIVE_UP that takes those given up off the queue) and tell them."""
        try:
            while batch := self.waiters.due(now := self.loop.time()):
                lease: waiting.LeaseOwner | None = None
                try:
                    if self.waiters.together(batch, now):
                        lease = await self.node.give_up([w.wait for w in batch])
                except Exception:  # noqa: BLE001,S110 - each makes its own last attempt instead
                    pass
                finally:
                    settled = self.waiters.settle(batch, lease)
                    for w in settled:
                        _wake(w)
        finally:
            self.giving_up = None
            self._idle()
            self._arm()

    async def _run(self) -> None:
        me = asyncio.current_task()
        try:
            while self.waiters:
                step = self.waiters.listen_timeout(self.loop.time())
                try:
                    popped = await self.node.blpop(self.waiters.keys, step)
                except Exception as exc:  # noqa: BLE001 - handed to the waiters, who raise it
                    for w in self.waiters.fail(driving.handed(self.node, exc)):
                        _wake(w)
                    continue
                if popped:
                    waiter = self.waiters.route(popped)
                    if waiter is not None:
                        _wake(waiter)
        finally:
            if self.task is me:
                self.task = None
            if not self.waiters and self.registry.get(self.key) is self:
                del self.registry[self.key]


def _wake(waiter: waiting.Waiter) -> None:
    if not waiter.signal.done():
        waiter.signal.set_result(None)


async def wait(node: Any, req: Wait) -> Any:
    """Wait for ``req`` with the listener of ``node``'s client for its wake keys in the running
    loop."""
    found: dict[Hashable, Listener] = waiting.registry(node.client)[2]
    key = node.listen_key(req)
    listener = found.get(key)
    loop = asyncio.get_running_loop()
    if listener is None or listener.loop is not loop:
        listener = found[key] = Listener(node, req, loop, found)
    return await listener.wait(req)
