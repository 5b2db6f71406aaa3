"""Run quorum flows with asyncio redis-py clients: one pipelined connection per node.

The asyncio twin of :mod:`redlease.core.quorum._blocking` (same flows, same decisions, same
:class:`~redlease.core.quorum._blocking.Slot` bookkeeping): a fan-out writes its request to every
node's connection synchronously, then the calling task reads the replies itself, in order, under
one deadline for the whole fan-out. No reader task and no future per request; only tasks sharing
a channel wait (for the *reader role* or for their reply) on a future. A read cut short by the
deadline leaves redis-py's parser resumable (``disconnect_on_error=False``), so the late reply is
consumed in order by the next reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from typing import Any

import redis.exceptions as rex

from redlease.core import _async
from redlease.core.protocol import Request, Wait
from redlease.core.quorum import _probe
from redlease.core.quorum._blocking import (
    FIRST_CONTACT,
    LATE_GRACE,
    RETRY_CONNECT,
    Memo,
    Slot,
    lost,
    pack,
    settled,
    submit_all,
    to_result,
)
from redlease.core.quorum.flows import FanOut, Marked, QFlow, Ready, Settings, run
from redlease.core.rules import Down, Probe, Result
from redlease.errors import LockError


class Channel:
    """One pipelined asyncio connection to one node, reconnected on demand, read by its callers."""

    def __init__(self, client: Any, name: str, dead_after: float) -> None:
        self.client = client
        self.name = name
        self.dead_after = dead_after
        self.probe: Probe | None = None
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None  # connecting
        self._backlog: list[tuple[tuple[Any, ...], Slot]] = []
        self._inflight: deque[Slot] = deque()
        self._head_since = 0.0
        self._reading = False  # some task holds the reader role
        self._waiters: list[asyncio.Future[None]] = []
        self._disposing: set[asyncio.Task[None]] = set()
        self._settled = asyncio.Event()
        self._retry_at = 0.0
        self._error: BaseException | None = None
        self._closed = False

    # -- callers --------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background unless connected, connecting or backing off."""
        if self._conn is not None or self._task is not None or self._closed:
            return
        if time.monotonic() < self._retry_at:
            return
        self._settled.clear()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"redlease-node-{self.name}"
        )

    async def wait_settled(self, deadline: float) -> Probe | None:
        """Wait until connected (return the probe) or failed/``deadline`` (return None)."""
        if self._task is not None and self._conn is None:
            left = deadline - time.monotonic()
            if left > 0:
                try:
                    async with asyncio.timeout(left):
                        await self._settled.wait()
                except TimeoutError:
                    pass
        return self.probe if self._conn is not None else None

    def submit(
        self, args: tuple[Any, ...], after: Slot | None = None, memo: Memo | None = None
    ) -> Slot:
        """Write ``args`` (or queue it until connected); the slot gets the raw reply.

        Synchronous: the bytes are in the transport (in order) when it returns; call
        :meth:`drain` before waiting. ``after``: as in the blocking channel.
        """
        slot = Slot()
        if after is not None and lost(after):
            slot.set(after.value)
        elif self._conn is not None:
            self._send(args, slot, memo)
        elif self._closed:
            slot.set(rex.ConnectionError("node set closed"))
        elif self._task is not None or time.monotonic() >= self._retry_at:
            self._backlog.append((args, slot))
            self.start()
        else:
            slot.set(self._error or rex.ConnectionError("not connected"))
        return slot

    async def drain(self) -> None:
        """Flow control: wait while the transport's write buffer is over its high-water mark."""
        conn = self._conn
        writer = getattr(conn, "_writer", None)
        if writer is None or not writer.transport.get_write_buffer_size():
            return
        try:
            await writer.drain()
        except Exception as exc:  # noqa: BLE001 - reported through the slots
            if self._conn is conn:
                self._drop(exc)

    async def wait(self, slot: Slot) -> None:
        """Until ``slot`` is filled: read replies (reader role) or wait for them.

        The caller bounds it with a timeout; cancelling it never loses a reply.
        """
        while not slot.done:
            conn = self._conn
            if conn is None or self._reading or not self._inflight:
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.append(fut)
                await fut
                continue
            self._reading = True
            try:
                await self._read_until(conn, slot)
            finally:
                self._reading = False
                self._wake()

    async def collect(self, slot: Slot) -> None:
        """After the deadline: take the replies that already arrived, without waiting.

        A fan-out waits for its nodes one after the other, so a reply must not count as late
        only because an earlier node used up the time. Reading buffered data never suspends;
        ``timeout(0)`` stops it at the first read that would. If another task holds the reader
        role (and is handing replies out), wait up to :data:`LATE_GRACE` for it.
        """
        if not slot.done:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LATE_GRACE if self._reading else 0):
                    await self.wait(slot)
        self._check_dead()

    def _check_dead(self) -> None:
        """Drop the connection if its oldest request has been unanswered for ``dead_after``."""
        if (
            self._conn is not None
            and self._inflight
            and time.monotonic() - self._head_since > self.dead_after
        ):
            self._drop(rex.TimeoutError(f"no reply for {self.dead_after:g}s"))

    @property
    def queued(self) -> int:
        """Requests written and not answered yet (a slow node piles them up)."""
        return len(self._inflight)

    @property
    def last_error(self) -> BaseException | None:
        return self._error

    async def close(self) -> None:
        """Drop the connection (requests in flight fail); later requests fail at once."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        error = rex.ConnectionError("node set closed")
        if self._conn is not None:
            self._drop(error)
        self._fail_backlog(error)
        self._wake()
        if self._disposing:
            await asyncio.gather(*self._disposing, return_exceptions=True)

    # -- internals ------------------------------------------------------------------------------

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _send(self, args: tuple[Any, ...], slot: Slot, memo: Memo | None = None) -> None:
        conn = self._conn
        writer = getattr(conn, "_writer", None)
        try:
            if writer is None or writer.transport.is_closing():  # never reconnect silently here
                raise rex.ConnectionError(f"connection to {self.name} lost")
            writer.writelines(pack(conn, args, memo))
        except Exception as exc:  # noqa: BLE001 - reported through the slot
            slot.set(exc)
            self._drop(exc)
            return
        if not self._inflight:
            self._head_since = time.monotonic()
        self._inflight.append(slot)

    def _drop(self, error: BaseException) -> None:
        """Close the connection (in the background); every request in flight fails."""
        conn, self._conn, self.probe = self._conn, None, None
        self._error = error
        pending = list(self._inflight)
        self._inflight.clear()
        for slot in pending:
            slot.set(error)
        self._wake()
        if conn is not None:
            task = asyncio.get_running_loop().create_task(self._dispose(conn))
            self._disposing.add(task)
            task.add_done_callback(self._disposing.discard)

    async def _dispose(self, conn: Any) -> None:
        try:
            await conn.disconnect()
        finally:
            await self.client.connection_pool.release(conn)

    def _fail_backlog(self, error: BaseException) -> None:
        backlog, self._backlog = self._backlog, []
        for _, slot in backlog:
            slot.set(error)

    async def _read_until(self, conn: Any, slot: Slot) -> None:
        """Reader role: hand replies to their slots in order until ``slot`` is filled."""
        while not slot.done:
            try:
                value: Any = await conn.read_response(timeout=math.inf, disconnect_on_error=False)
            except rex.ResponseError as exc:
                value = exc
            except Exception as exc:  # noqa: BLE001 - the connection is gone
                if self._conn is conn:
                    self._drop(exc)
                return
            if self._conn is not conn:  # dropped meanwhile: the slots were failed
                return
            self._inflight.popleft().set(value)
            self._head_since = time.monotonic()
            if self._waiters:
                self._wake()

    async def _connect(self) -> tuple[Any, Probe]:
        pool = self.client.connection_pool
        conn = await pool.get_connection()
        try:
            for cmd in _probe.COMMANDS:
                await conn.send_command(*cmd, check_health=False)
            replies: list[object] = []
            for _ in _probe.COMMANDS:
                try:
                    replies.append(await conn.read_response())
                except rex.ResponseError as exc:
                    replies.append(exc)
            return conn, _probe.parse(replies, time.monotonic())
        except BaseException:
            await conn.disconnect()
            await pool.release(conn)
            raise

    async def _run(self) -> None:
        """Background connect: handshake, probe, then write what was queued meanwhile."""
        try:
            conn, probe = await self._connect()
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the waiters
            self._retry_at = time.monotonic() + RETRY_CONNECT
            self._error = exc
            self._fail_backlog(exc)
            return
        finally:
            self._task = None
            self._settled.set()
            self._wake()
        if self._closed:
            self._fail_backlog(rex.ConnectionError("node set closed"))
            await self._dispose(conn)
            return
        self._conn, self.probe, self._error = conn, probe, None
        backlog, self._backlog = self._backlog, []
        for args, slot in backlog:
            if self._conn is None:
                slot.set(self._error or rex.ConnectionError(f"connection to {self.name} lost"))
            else:
                self._send(args, slot)
        self._wake()


class QuorumNode(_async.AsyncNode):
    """The asyncio executor of one lock on a :class:`~redlease.core.quorum.NodeSet`."""

    def __init__(self, nodeset: Any, settings: Settings) -> None:
        self.client = nodeset
        self.lock = settings.prim.name
        self.name = nodeset.description
        self.cluster = False
        self.socket_timeout = nodeset.socket_timeout
        self.nodeset = nodeset
        self.settings = settings
        self._waiters = [_async.AsyncNode(c, self.lock) for c in nodeset.clients]
        self._next_wait = settings.rng.randrange(len(self._waiters))

    async def execute(self, req: Request) -> Any:
        if isinstance(req, Wait):
            return await self._wait(req)
        return await self._drive(run(self.settings, req))

    async def _drive(self, flow: QFlow) -> Any:
        reply: Any = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as stop:
                return stop.value
            if isinstance(step, FanOut):
                reply = await self._fan_out(step)
            elif isinstance(step, Ready):
                reply = await self._ready(step.timeout)
            elif isinstance(step, Marked):
                self.nodeset.marked(step.index, step.run_id)
                reply = None
            else:  # pragma: no cover - flows yield nothing else
                raise TypeError(step)

    async def _ready(self, timeout: float) -> list[Probe | Down | None]:
        channels = self.nodeset.achannels()
        first_use = all(ch.probe is None for ch in channels)
        for ch in channels:
            ch.start()
        known = [ch.probe for ch in channels]
        if None not in known:  # all connected: no need to wait (gather would start tasks)
            return list(known)
        # the first contact needs a handshake and a probe: give it more than one round trip
        deadline = time.monotonic() + (max(timeout, FIRST_CONTACT) if first_use else timeout)
        probes = await asyncio.gather(*(ch.wait_settled(deadline) for ch in channels))
        return [settled(self.lock, ch, p) for ch, p in zip(channels, probes, strict=True)]

    async def _fan_out(self, step: FanOut) -> dict[int, Result]:
        """Write to every node first, then read the replies under one shared deadline."""
        channels = self.nodeset.achannels()
        memo: Memo = {}
        slots = {
            i: submit_all(channels[i], req if isinstance(req, tuple) else (req,), memo)
            for i, req in step.calls.items()
        }
        for i in slots:
            await channels[i].drain()
        if step.timeout > 0:
            try:
                async with asyncio.timeout(step.timeout):
                    for i in sorted(slots, key=lambda i: channels[i].queued):  # slow nodes last
                        await channels[i].wait(slots[i][-1])
            except TimeoutError:
                for i, ss in slots.items():
                    await channels[i].collect(ss[-1])
        return {
            i: to_result(self.lock, channels[i].name, ss, isinstance(step.calls[i], tuple))
            for i, ss in slots.items()
        }

    async def _wait(self, req: Wait) -> bool:
        n = len(self._waiters)
        channels = self.nodeset.achannels()
        for k in range(n):
            i = (self._next_wait + k) % n
            if channels[i].probe is None:
                continue
            try:
                return bool(await self._waiters[i].execute(req))
            except LockError:
                self._next_wait = (i + 1) % n
        await asyncio.sleep(min(req.timeout, 0.05))
        return False
