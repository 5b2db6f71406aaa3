"""Write the refresh cycle's merge patches with a bounded number in flight.

A cycle hands over the patches of the objects whose status changed (:meth:`Patcher.submit`) and
goes on: at most ``limit`` requests are in flight, so 5,000 changed locks never open 5,000 API
connections. One object's patches go out in order, one at a time; a patch submitted while an
earlier one for the same object waits or is in flight is folded into it (the newest value of
each field wins), so a slow object never delays another (tests/operator/test_api_faults.py,
``test_slow_status_patch_does_not_stall_others``). A failed request is retried after a pause
(1, 2, 4 ... :data:`.apifaults.MAX_BACKOFF` s) for as long as the API server is away; an
answer that will not change on retry (404: the object is gone, other 4xx) drops the patch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from redlease.errors import KubeError
from redlease.kube import paths
from redlease.operator.apifaults import MAX_BACKOFF, transient

log = logging.getLogger("redlease.operator")
K = TypeVar("K", bound=Hashable)  # what a patch goes to; shown in log lines by its str()
Send = Callable[[K, dict[str, Any]], Awaitable[None]]  # (target, merge patch)


@dataclass(frozen=True, slots=True)
class LockPart:
    """A DistributedLock, or its ``subresource`` (``status``): the operator's patch targets,
    shown as their API path."""

    namespace: str
    name: str
    subresource: str = ""

    def __str__(self) -> str:
        return paths.lock(self.namespace, self.name, self.subresource)


def compose(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One JSON merge patch doing what ``first`` then ``second`` do (RFC 7386): objects
    merge, every other value of ``second`` (``None``: delete) replaces."""
    out = dict(first)
    for key, value in second.items():
        old = out.get(key)
        out[key] = (
            compose(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


class Patcher(Generic[K]):
    """Bounded, per-object ordered, coalescing merge-patch writer (see the module docstring).

    ``allowed()`` is asked before each request: a replica that stops leading sends nothing."""

    def __init__(
        self, send: Send[K], *, limit: int = 16, allowed: Callable[[], bool] = lambda: True
    ) -> None:
        self._send = send
        self.limit = limit
        self._allowed = allowed
        self._pending: dict[K, dict[str, Any]] = {}  # target -> the patch not yet sent
        self._busy: set[K] = set()  # targets in flight or waiting for a retry
        self._ready: asyncio.Queue[K] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._retries: set[asyncio.TimerHandle] = set()
        self._failures: dict[K, int] = {}
        self.sent = 0  # requests answered with success (for tests and /metrics)

    def in_flight(self) -> int:
        """Objects with a patch waiting, in flight or in a retry pause."""
        return len(self._pending.keys() | self._busy)

    def submit(self, target: K, patch: dict[str, Any]) -> None:
        """Queue ``patch`` for ``target`` (folded into one already waiting)."""
        if self._ready is None:
            self._ready = asyncio.Queue()
            self._workers = [
                asyncio.get_running_loop().create_task(self._work()) for _ in range(self.limit)
            ]
        waiting = self._pending.get(target)
        self._pending[target] = patch if waiting is None else compose(waiting, patch)
        if waiting is None and target not in self._busy:
            self._ready.put_nowait(target)

    async def _work(self) -> None:
        assert self._ready is not None
        while True:
            target = await self._ready.get()
            patch = self._pending.pop(target, None)
            if patch is None:
                continue
            if not self._allowed():
                continue  # not the active replica: the active one writes
            self._busy.add(target)
            again = False
            try:
                await self._send(target, patch)
            except KubeError as exc:
                again = transient(exc)
                log.warning("%s: %s%s", target, exc.reason, "; will retry" if again else "")
                if again:
                    newer = self._pending.pop(target, None)
                    self._pending[target] = patch if newer is None else compose(patch, newer)
                    self._retry_later(target)
            except Exception as exc:  # noqa: BLE001 - one object's patch never stops the writer
                log.warning("%s: %s: %s", target, type(exc).__name__, exc)
            else:
                self.sent += 1
            finally:
                if not again:
                    self._failures.pop(target, None)
                    self._busy.discard(target)
                    if target in self._pending:
                        self._ready.put_nowait(target)

    def _retry_later(self, target: K) -> None:
        failures = self._failures[target] = self._failures.get(target, 0) + 1
        delay = min(2.0 ** (failures - 1), MAX_BACKOFF)

        def wake() -> None:
            self._retries.discard(handle)
            self._busy.discard(target)
            if target in self._pending and self._ready is not None:
                self._ready.put_nowait(target)

        handle = asyncio.get_running_loop().call_later(delay, wake)
        self._retries.add(handle)

    async def aclose(self) -> None:
        """Stop writing (the operator is stopping); what was not sent is dropped."""
        for handle in self._retries:
            handle.cancel()
        self._retries.clear()
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []
        self._ready = None
