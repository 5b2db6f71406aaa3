"""The asyncio driver of the quorum transport: redis-py asyncio connections and futures.

The state machine and the flow driving are shared (:mod:`.channel`, :mod:`.executor`); this
module only moves bytes and awaits: the state needs no lock (one event loop), callers that wait
for a wake-up await a future, a reader's read is bounded by the caller's deadline (a read cut
short leaves redis-py's parser resumable, ``disconnect_on_error=False``, so the late reply is
consumed in order by the next reader), and connecting (handshake and probe) runs in a
background task. No reader task and no future per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis.exceptions as rex

from redlease.core import _async
from redlease.core.protocol import Request
from redlease.core.quorum import _probe, channel
from redlease.core.quorum.executor import Blpop, Collect, QuorumExecutor, Settle, Step
from redlease.errors import LockError


class Channel(channel.Channel):
    """A :class:`~redlease.core.quorum.channel.Channel` over an asyncio redis-py connection."""

    def __init__(self, client: Any, name: str, dead_after: float) -> None:
        # The state lives in the event loop's thread and no await happens while it is held, so
        # the lock is never contended; an RLock (always free for its own thread) stands in for
        # it at C speed, cheaper than a no-op context manager written in Python.
        super().__init__(client, name, dead_after, threading.RLock())
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None  # connecting
        self._disposing: set[asyncio.Task[None]] = set()

    async def wait_settled(self, deadline: float) -> None:
        """Wait until connected or failed, or until ``deadline``."""
        left = self._settle_locked(deadline)
        while left is not None:
            await self._sleep(left)
            left = self._settle_locked(deadline)

    async def wait(self, slot: channel.Slot, deadline: float) -> None:
        """Until ``slot`` is filled or ``deadline``: read replies (reader role) or wait.

        Before the deadline a read is bounded by the caller's timeout, not by ``deadline``
        (one timer per fan-out instead of one per read): call it through :func:`collect`.
        """
        while True:
            conn = self._claim_locked(slot, deadline)
            while isinstance(conn, float):
                await self._sleep(conn)
                conn = self._claim_locked(slot, deadline)
            if conn is None:
                return
            try:
                await self._read_until(conn, slot, deadline)
            finally:
                more = self._reader_done(slot, deadline)
            if not more:
                return

    async def drain(self) -> None:
        """Flow control: wait while the transport's write buffer is over its high-water mark."""
        conn = self._conn
        writer = getattr(conn, "_writer", None)
        if writer is None or not writer.transport.get_write_buffer_size():
            return
        try:
            await writer.drain()
        except Exception as exc:  # noqa: BLE001 - reported through the slots
            self._received(conn, exc)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._close()
        if self._disposing:
            await asyncio.gather(*self._disposing, return_exceptions=True)

    # -- driver hooks ---------------------------------------------------------------------------

    def _spawn(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"redlease-node-{self.name}"
        )

    def _write(self, conn: Any, packed: Any) -> None:
        writer = getattr(conn, "_writer", None)
        if writer is None or writer.transport.is_closing():  # never reconnect silently here
            raise self._lost()
        writer.writelines(packed)

    def _dispose(self, conn: Any) -> None:
        task = asyncio.get_running_loop().create_task(self._disconnect(conn))
        self._disposing.add(task)
        task.add_done_callback(self._disposing.discard)

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- I/O --------------------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        """Until woken (:meth:`_notify`) or ``seconds`` passed."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._sleepers += 1
        try:
            async with asyncio.timeout(seconds):
                await fut
        except TimeoutError:
            pass
        finally:
            self._sleepers -= 1

    async def _read_until(self, conn: Any, slot: channel.Slot, deadline: float) -> None:
        """Reader role: hand replies to their slots in order until ``slot`` is filled.

        Before the deadline the caller's timeout bounds the reads (one timer per fan-out, not
        one per read). Past it, only what is already buffered is read: reading buffered data
        never suspends, and ``timeout(0)`` stops the first read that would.
        """
        if deadline <= time.monotonic():
            try:
                async with asyncio.timeout(0):
                    await self._read_until(conn, slot, math.inf)
            except TimeoutError:
                self._check_dead(conn)
            return
        while not slot.done:
            try:
                value: Any = await conn.read_response(timeout=math.inf, disconnect_on_error=False)
            except Exception as exc:  # noqa: BLE001 - an error reply, or the connection is gone
                value = exc
            if not self._received(conn, value):
                return

    async def _disconnect(self, conn: Any) -> None:
        try:
            await conn.disconnect()
        finally:
            await self.client.connection_pool.release(conn)

    async def _run(self) -> None:
        """Background connect: handshake and probe on a connection of the client's pool."""
        pool = self.client.connection_pool
        try:
            conn = await pool.get_connection()
            try:
                probe_cmds = conn.pack_commands(_probe.COMMANDS)
                await conn.send_packed_command(probe_cmds, check_health=False)
                replies = [await _reply(conn) for _ in _probe.COMMANDS]
                probe = _probe.parse(replies, time.monotonic())
            except BaseException:
                await self._disconnect(conn)
                raise
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the waiters
            self._connect_failed(exc)
            return
        except asyncio.CancelledError:  # closed while connecting
            self._connect_failed(rex.ConnectionError("node set closed"))
            raise
        self._connected(conn, probe)


async def collect(pairs: Sequence[tuple[Channel, channel.Slot]], deadline: float) -> None:
    """Wait for each ``(channel, slot)`` in turn until its slot is filled or ``deadline``."""
    for ch, _ in pairs:
        await ch.drain()
    try:
        async with asyncio.timeout(deadline - time.monotonic()):
            for ch, slot in pairs:
                await ch.wait(slot, deadline)
    except TimeoutError:  # past the deadline: take what has arrived meanwhile
        for ch, slot in pairs:
            await ch.wait(slot, deadline)


async def _reply(conn: Any) -> object:
    try:
        return await conn.read_response()
    except rex.ResponseError as exc:
        return exc


class QuorumNode(QuorumExecutor, _async.AsyncNode):
    """The asyncio executor of one lock on a :class:`~redlease.core.quorum.NodeSet`."""

    single = _async.AsyncNode  # the driver of one node, for the wake-up wait

    async def execute(self, req: Request) -> Any:
        steps, reply = self.steps(req), None
        try:
            while True:
                reply = await self._perform(steps.send(reply))
        except StopIteration as stop:  # the steps are done: ``stop.value`` is the reply
            return stop.value

    @staticmethod
    async def _perform(step: Step) -> Any:
        if isinstance(step, Collect):
            await collect(step.pairs, step.deadline)  # type: ignore[arg-type]
        elif isinstance(step, Settle):
            for ch in step.channels:
                await ch.wait_settled(step.deadline)  # type: ignore[attr-defined]
        elif isinstance(step, Blpop):
            try:
                return await step.node.execute(step.req)
            except LockError as exc:
                return exc
        else:
            await asyncio.sleep(step.seconds)
        return None
