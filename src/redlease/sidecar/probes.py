"""The probe-only listener (``--probes``) on a thread and event loop of its own.

The kubelet's probes must not queue behind whatever the sidecar's main event loop is doing: a
flood of the lock API (1,000 blocking acquires, 256 stalled bodies reopened as fast as they are
evicted) keeps that loop busy with thousands of connections a second, and a probe served there
waited 150-300 ms for its turn (docs/lockapi.md). So ``--probes`` is served by its own thread
running its own event loop, behind its own guard (:func:`redlease.kube.httpguard.serve`, a cap
of :data:`~redlease.sidecar.web.PROBE_CAP`), and it never calls into the main loop's objects: it
answers from a :class:`Verdict` that the main loop publishes on a :class:`Board`.

The verdict stays honest because it carries its own expiry:

* the main loop publishes every :data:`BEAT` seconds (and at once after a change of state); a
  published verdict holds for at most ``stall`` seconds (:data:`LOOP_STALL`). A main loop that
  stops making progress stops publishing, so within ``stall`` the probes answer 500 / 503: a
  wedged sidecar fails its liveness probe (as it did before, by timing out), a sidecar merely
  busy does not;
* each part of the verdict also holds only as long as the main loop's own state says: healthy
  until the election loop's current step is overdue (:meth:`~redlease.sidecar.elector.Elector.
  healthy_until`), and a readiness that rests on leadership only until the term's local
  deadline, so no answer claims leadership after the renew deadline, even from a stale verdict.

The thread and the main loop share one object, the :class:`Board`; the verdict is one immutable
value replaced whole (a single reference assignment), so a reader never sees half of one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from redlease.kube.httpguard import GuardedServer
from redlease.kube.httpguard import serve as guarded

BEAT = 0.25  # seconds between two publications of the verdict by the main loop
LOOP_STALL = 5.0  # seconds a published verdict holds: a main loop silent longer is wedged
CLOSE_TIMEOUT = 5.0  # seconds to wait for the probe thread to close its port and end

NEVER = -math.inf


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the probes answer, as monotonic instants: healthy (``/healthz`` 200) strictly
    before ``healthy_until``, ready (``/readyz`` 200) strictly before ``ready_until``;
    :data:`NEVER` for "not now", ``math.inf`` for "until further notice"."""

    healthy_until: float = NEVER
    ready_until: float = NEVER


class Judge(Protocol):
    """Who the verdict comes from (the running sidecar, on its main loop)."""

    def verdict(self) -> Verdict: ...


class Board:
    """The latest verdict, published by the main loop and read by the probe thread
    (:func:`~redlease.sidecar.web.probes_app`). Both sides touch only :attr:`_verdict`,
    replaced whole on each publication."""

    def __init__(
        self, stall: float = LOOP_STALL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stall = stall
        self.clock = clock
        self._verdict = Verdict()
        self.published = 0  # how many verdicts the main loop has published

    def publish(self, verdict: Verdict) -> None:
        """Main loop: ``verdict``, holding at most :attr:`stall` seconds from now."""
        horizon = self.clock() + self.stall
        self._verdict = Verdict(
            min(verdict.healthy_until, horizon), min(verdict.ready_until, horizon)
        )
        self.published += 1

    def healthy(self) -> bool:
        return self.clock() < self._verdict.healthy_until

    def is_ready(self) -> bool:
        return self.clock() < self._verdict.ready_until


class ProbeListener:
    """``app`` (built by ``make_app`` in the probe thread) served on ``host:port`` behind its
    own guard by a thread with its own event loop; the verdict on ``board`` published by the
    calling (main) loop from ``judge`` every :data:`BEAT` seconds and on :meth:`poke`."""

    def __init__(
        self,
        judge: Judge,
        board: Board,
        make_app: Callable[[], web.Application],
        *,
        cap: int,
    ) -> None:
        self.judge = judge
        self.board = board
        self.make_app = make_app
        self.cap = cap
        self.port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the probe thread's
        self._stop: asyncio.Event | None = None  # in the probe thread's loop
        self._beat: asyncio.Task[None] | None = None  # in the main loop
        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._soon: asyncio.Handle | None = None
        self.guard: Any = None  # the probe port's ConnectionGuard, once serving

    async def start(self, host: str, port: int) -> ProbeListener:
        """Publish a first verdict, then bind ``host:port`` in the probe thread; an ``OSError``
        if the address cannot be bound (the thread has ended then)."""
        self.publish()
        bound: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(host, port, bound),),
            name="redlease-probes", daemon=True,
        )  # fmt: skip
        self._thread.start()
        self.port = await asyncio.wrap_future(bound)
        self._beat = asyncio.create_task(self._beating(), name="redlease-probe-verdict")
        return self

    def publish(self) -> None:
        """Main loop: publish the judge's verdict now."""
        self._soon = None
        self.board.publish(self.judge.verdict())

    def poke(self) -> None:
        """Main loop: the state changed; publish once the current callback is done (a
        callback that is itself part of working out the verdict may be the caller)."""
        if self._soon is None and self._beat is not None:
            self._soon = asyncio.get_running_loop().call_soon(self.publish)

    async def _beating(self) -> None:
        while True:
            self.publish()
            await asyncio.sleep(BEAT)

    async def _serve(self, host: str, port: int, bound: concurrent.futures.Future[int]) -> None:
        """The probe thread: serve until :meth:`close`."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            server: GuardedServer = await guarded(self.make_app(), host, port, cap=self.cap)
        except Exception as exc:  # noqa: BLE001 - any failure must reach the waiting start()
            bound.set_exception(exc)
            self._done.set_result(None)
            return
        self.guard = server.guard
        bound.set_result(server.port)
        try:
            await self._stop.wait()
        finally:
            await server.close()
            self._done.set_result(None)

    async def close(self) -> None:
        """Stop publishing, close the port and end the thread (bounded)."""
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(stop.set)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(self._done), CLOSE_TIMEOUT)
