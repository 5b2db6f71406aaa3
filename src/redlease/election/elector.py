"""The public elector: client-go's ``LeaderElector`` callbacks for Python programs.

One logic for both flavours: :class:`~redlease.election.electorcore.ElectorCore` runs the one
campaign loop (:class:`~redlease.election.campaign.Campaign` over a
:class:`~redlease.election.campaign.RedisLease`) on an asyncio loop and turns its hooks into
the user's callbacks. :class:`AsyncElector` (``redlease.aio.Elector``) runs it on the caller's
loop over an asyncio lock; :class:`Elector` (``redlease.Elector``) runs the same core on a loop
of its own (in the thread that calls :meth:`Elector.run`, or a background thread from
:meth:`Elector.start`) over a blocking lock whose calls go to one worker thread.

Who leads is learned without extra round trips per period: a refused acquire names the holder
the script saw (``Refused(holder)``), a grant names this process, and one read of the lock view
at the start names the holder before the first acquire. A standby's acquire waits up to a retry
period for a release, which hands the lease over at once (notified, not polled), so a stopped
leader's successor leads a round trip later, not a TTL later. See docs/elector.md.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

from redlease.core import aio, locks
from redlease.core.lease import Lease
from redlease.election.electorcore import Facade
from redlease.errors import ConfigError, RedleaseError

__all__ = ["AsyncElector", "Elector", "Leading", "LeadingBlock"]


class Leading:
    """:attr:`AsyncElector.leading`: true while this process leads (before its renew deadline),
    as the blocking elector's ``leading``; called, the context manager that runs a block while
    leading::

        async with elector.leading() as lease:
            ...  # cancelled if the term ends; the async with then raises LeaseLost

    It campaigns (as :meth:`AsyncElector.start`) until this process leads, runs the block with
    the term's lease (``lease.fencing_token``), and when the term ends while the block runs
    (lost, renew deadline passed) cancels it before ``on_stopped_leading``: client-go's
    ``OnStartedLeading(ctx)``, the rule of :meth:`AsyncElector.run`'s ``work``, with the block
    as the term's work. The block then ends with :class:`~redlease.errors.LeaseLost`, not a
    bare ``CancelledError``. Leaving the block (normally or by an error) stops the campaign and
    releases the lease (:meth:`AsyncElector.stop`), so a standby takes over at once.
    """

    __slots__ = ("_elector",)

    def __init__(self, elector: AsyncElector) -> None:
        self._elector = elector

    def __bool__(self) -> bool:
        return self._elector.core.leading()

    def __eq__(self, other: object) -> bool:
        return bool(self) == other if isinstance(other, bool) else NotImplemented

    def __hash__(self) -> int:
        return hash(bool(self))

    def __repr__(self) -> str:
        return repr(bool(self))

    def __call__(self) -> LeadingBlock:
        return LeadingBlock(self._elector)


class LeadingBlock:
    """One term as an ``async with`` block (see :class:`Leading`)."""

    def __init__(self, elector: AsyncElector) -> None:
        self._elector = elector
        self._block: asyncio.Task[Any] | None = None  # the task running the block
        self._left = asyncio.Event()  # the block is over (its __aexit__ has begun)
        self._cut = False  # the block was cancelled because the term ended

    async def _work(self, lease: Lease, started: asyncio.Future[Lease]) -> None:
        """The term's work for the elector's core: the block runs in its own task, so this
        stands in for it until it ends; cancelled (the term ended) it cancels the block and
        waits for it to leave, so that the rule holds: work ends before
        ``on_stopped_leading``."""
        if started.done():  # a later term of a campaign whose block is over: nothing to run
            return
        started.set_result(lease)
        try:
            await self._left.wait()
        except asyncio.CancelledError:
            block = self._block
            if not self._left.is_set() and block is not None and not block.done():
                self._cut = True
                block.cancel(f"redlease: leadership of {self._elector.core.lock.name!r} ended")
                await self._left.wait()
            raise

    async def __aenter__(self) -> Lease:
        self._block = asyncio.current_task()
        started: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        elector = self._elector
        await elector.start(functools.partial(self._work, started=started))
        campaign = elector._task
        assert campaign is not None
        either: set[asyncio.Future[Any]] = {started, campaign}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._left.set()
            await elector.stop()
            raise
        if not started.done():  # the campaign ended before this process led
            self._left.set()
            await elector.stop()
            campaign.result()  # its error, if any
            raise RedleaseError("the campaign ended before this process led")
        return started.result()

    async def __aexit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._left.set()
        await self._elector.stop()
        if self._cut:  # the term ended first: its cancellation is taken back, LeaseLost instead
            lost = aio.block_lost(self._elector.core.lock.name, "leadership ended")
            if t is not None and issubclass(t, asyncio.CancelledError):
                raise lost from None


class AsyncElector(Facade):
    """Leader election on one lock, asyncio (``redlease.aio.Elector``).

    ``client``: ``redis.asyncio.Redis``, ``redis.asyncio.cluster.RedisCluster`` or an asyncio
    :class:`redlease.quorum.NodeSet`. Callbacks may be plain functions or coroutine functions;
    they run inline on the elector's task (keep them short: renewals wait for them).
    ``async with elector.leading() as lease:`` runs a block while leading (:class:`Leading`).
    """

    lock_class = aio.Lock

    def _setup(self) -> None:
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def leading(self) -> Leading:
        """Truthy while this process leads (before its renew deadline); ``leading()`` runs a
        block while leading (:class:`Leading`)."""
        return Leading(self)

    async def run(self, work: Callable[[Lease], Awaitable[Any]] | None = None) -> None:
        """Campaign until :meth:`stop` (or cancellation); releases the lease on the way out.

        ``work``: a coroutine function run as a task for each term (with its lease, whose
        ``fencing_token`` is the term's) and cancelled when the term ends (lost, deadline
        passed, stopped) before ``on_stopped_leading`` is called: client-go's
        ``OnStartedLeading(ctx)``. Work that returns leaves the term running; its error is
        logged."""
        self._stop.clear()
        if work is not None and not callable(work):
            raise ConfigError("work", f"must be a coroutine function, got {work!r}")
        self.core.work = work
        await self.core.run(self._stop)

    async def start(self, work: Callable[[Lease], Awaitable[Any]] | None = None) -> AsyncElector:
        """Run in a background task (``work``: see :meth:`run`); returns at once."""
        if self._task is not None and not self._task.done():
            raise RedleaseError("elector already started")
        if work is not None and not callable(work):
            raise ConfigError("work", f"must be a coroutine function, got {work!r}")
        self._task = asyncio.create_task(
            self.run(work), name=f"redlease-elector-{self.core.lock.name}"
        )
        return self

    async def stop(self) -> None:
        """Stop campaigning: a leader tells ``on_stopped_leading`` (``STOPPED``), then
        releases the lease so a standby takes over at once. Waits for the task :meth:`start`
        made (a standby's pending acquire ends within a retry period)."""
        self._stop.set()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            await task

    async def __aenter__(self) -> AsyncElector:
        return await self.start()

    async def __aexit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def _in_thread(
    work: Callable[[Lease, threading.Event], Any],
) -> Callable[[Lease], Awaitable[None]]:
    """A blocking elector's ``work`` as the core runs it: in a thread, told to end by an
    event when the task is cancelled."""

    async def term(lease: Lease) -> None:
        ended = threading.Event()
        thread = asyncio.ensure_future(asyncio.to_thread(work, lease, ended))
        try:
            await asyncio.shield(thread)
        finally:
            ended.set()
            await asyncio.wait([thread])  # never two terms' work at once

    return term


class Elector(Facade):
    """Leader election on one lock, blocking (``redlease.Elector``).

    ``client``: ``redis.Redis``, ``redis.cluster.RedisCluster`` or a blocking
    :class:`redlease.quorum.NodeSet`. The campaign runs on an asyncio loop of its own (in the
    thread of :meth:`run`, or a background thread from :meth:`start`); its Redis calls go to
    one worker thread. Callbacks are plain functions; they run on the elector's thread, one at
    a time (keep them short: renewals wait for them). A hung Redis frees the worker by each
    call's own deadline (docs/safety.md, "Deadlines own the I/O"), whatever the client's
    ``socket_timeout``; the elector stops leading at its renew deadline regardless.
    """

    lock_class = locks.Lock

    @property
    def leading(self) -> bool:
        """True while this process leads (before its renew deadline)."""
        return self.core.leading()

    def _setup(self) -> None:
        self._guard = threading.Lock()
        self._running: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._thread: threading.Thread | None = None

    def run(self, work: Callable[[Lease, threading.Event], Any] | None = None) -> None:
        """Campaign in this thread until :meth:`stop` is called (from a callback or another
        thread) or KeyboardInterrupt; releases the lease on the way out.

        ``work(lease, ended)`` runs in a thread of its own for each term (``lease.fencing_token``
        is the term's); ``ended`` (a :class:`threading.Event`) is set when the term ends (lost,
        deadline passed, stopped), before ``on_stopped_leading``: client-go's
        ``OnStartedLeading(ctx)``; ``work`` must then return soon (a thread cannot be
        cancelled: the next term, and :meth:`run`'s return, wait for it). Work that returns
        leaves the term running; its error is logged."""
        self._set_work(work)
        asyncio.run(self._main(None))

    def _set_work(self, work: Callable[[Lease, threading.Event], Any] | None) -> None:
        if work is not None and not callable(work):
            raise ConfigError("work", f"must be callable, got {work!r}")
        self.core.work = None if work is None else _in_thread(work)

    def start(self, work: Callable[[Lease, threading.Event], Any] | None = None) -> Elector:
        """Run in a background thread (``work``: see :meth:`run`); returns once it is
        campaigning."""
        with self._guard:
            if self._thread is not None and self._thread.is_alive():
                raise RedleaseError("elector already started")
            self._set_work(work)
            ready = threading.Event()
            self._thread = threading.Thread(
                target=lambda: asyncio.run(self._main(ready)),
                name=f"redlease-elector-{self.core.lock.name}",
                daemon=True,
            )
            self._thread.start()
        ready.wait()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop campaigning (see :meth:`AsyncElector.stop`); waits up to ``timeout`` for the
        thread :meth:`start` made, unless called from the elector's own thread."""
        with self._guard:
            if self._running is not None:
                loop, stop = self._running
                loop.call_soon_threadsafe(stop.set)
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    async def _main(self, ready: threading.Event | None) -> None:
        stop = asyncio.Event()
        try:
            with self._guard:
                if self._running is not None:
                    raise RedleaseError("elector already running")
                self._running = (asyncio.get_running_loop(), stop)
        finally:
            if ready is not None:
                ready.set()
        offload = ThreadPoolExecutor(1, thread_name_prefix="redlease-elector-io")
        try:
            await self.core.run(stop, offload)
        finally:
            with self._guard:
                self._running = None
            offload.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Elector:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, v: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
