"""The listener of a blocking client's waiters on one lock (a thread): one BLPOP in flight for
all of them, each served from :class:`~redlease.core.waiting.WaitList`; ``node`` is the
:class:`~redlease.core._sync.SyncNode` (or a RedLock set's wait node) it listens and gives up
through."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from typing import Any

from redlease.core import driving, waiting
from redlease.core.requests import Wait


class Listener:
    """The one listener (a thread) of a client's waiters on one lock's wake keys in this
    process: waiters wait on events, the thread keeps one BLPOP in flight for all of them and
    serves them from :class:`~redlease.core.waiting.WaitList`. It lingers a moment after the
    last waiter (the next one is often about to come), holding no connection meanwhile, then
    leaves the client's ``registry`` (waiters join under :data:`_LISTENERS`, it leaves under it).

    Waiters due together are given up for together (as the asyncio listener does): the first
    whose deadline passes reads the lease once for all those due then, one at a time.
    """

    def __init__(self, node: Any, req: Wait, registry: dict[Any, Listener]) -> None:
        self.node = node
        self.waiters = waiting.WaitList(req.keys, req.grants)
        self.registry = registry
        self.key = node.listen_key(req)  # its key in ``registry``
        self.cond = threading.Condition()
        self.running = False
        self.giving_up = False  # a waiter's thread reads the lease for those due

    def join(self, req: Wait) -> waiting.Waiter:
        with self.cond:
            waiter = self.waiters.join(req, time.monotonic(), threading.Event())
            if self.running:
                self.cond.notify()
            else:
                self.running = True
                name = f"redlease-waiters {self.node.lock}"
                threading.Thread(target=self._run, name=name, daemon=True).start()
        return waiter

    def wait(self, waiter: waiting.Waiter) -> Any:
        try:
            if not waiter.signal.wait(waiter.wait.timeout) and waiter.wait.lease:
                self._give_up(waiter)
        finally:
            with self.cond:
                self.waiters.leave(waiter)
        if waiter.error is not None:
            raise waiter.error
        return waiter.reply if waiter.done else False

    def _give_up(self, waiter: waiting.Waiter) -> None:
        """At ``waiter``'s deadline: unless another thread is giving up for the waiters due
        (it serves ``waiter`` too before it stops), read the lease's owner (sent after the
        deadlines of all those due now, by the GIVE_UP that takes those given up off the queue)
        and tell them, while any are due."""
        with self.cond:
            mine = not self.giving_up and not waiter.done
            self.giving_up = self.giving_up or mine
        if not mine:
            waiter.signal.wait()  # served, failed or given up for by the thread giving up
            return
        try:
            while True:
                with self.cond:
                    now = time.monotonic()
                    batch = self.waiters.due(now)
                    if not batch:
                        self.giving_up = False
                        break
                    together = self.waiters.together(batch, now)
                lease: waiting.LeaseOwner | None = None
                try:
                    if together:
                        lease = self.node.give_up([w.wait for w in batch])
                except Exception:  # noqa: BLE001,S110 - each makes its own last attempt instead
                    pass
                with self.cond:
                    settled = self.waiters.settle(batch, lease)
                for w in settled:
                    w.signal.set()
        finally:  # after a failure here too: whoever is due now makes its own last attempt
            with self.cond:
                self.giving_up = False
                left = self.waiters.due(time.monotonic())
            for w in left:
                w.signal.set()

    def _run(self) -> None:
        while True:
            with self.cond:
                if not self.waiters:
                    self.cond.wait(waiting.LINGER)
            if not self.waiters:
                with _LISTENERS, self.cond:
                    if not self.waiters:
                        self.running = False
                        if self.registry.get(self.key) is self:
                            del self.registry[self.key]
                        return
            with self.cond:
                step = self.waiters.listen_timeout(time.monotonic())
            try:
                popped = self.node.blpop(self.waiters.keys, step)
            except Exception as exc:  # noqa: BLE001 - handed to the waiters, who raise it
                with self.cond:
                    served = self.waiters.fail(driving.handed(self.node, exc))
                for w in served:
                    w.signal.set()
                continue
            if popped:
                with self.cond:
                    waiter = self.waiters.route(popped)
                if waiter is not None:
                    waiter.signal.set()


_LISTENERS = threading.Lock()


def wait(node: Any, req: Wait) -> Any:
    """Wait for ``req`` with the listener of ``node``'s client for its wake keys."""
    found: dict[Hashable, Listener] = waiting.registry(node.client)[2]
    key = node.listen_key(req)
    with _LISTENERS:
        listener = found.get(key)
        if listener is None:
            listener = found[key] = Listener(node, req, found)
        waiter = listener.join(req)
    return listener.wait(waiter)
