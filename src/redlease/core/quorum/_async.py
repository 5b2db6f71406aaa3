"""The asyncio driver of the quorum transport: redis-py asyncio connections and futures.

The state machine and the flow driving are shared (:mod:`.channel`, :mod:`.executor`); this
module only moves bytes and awaits: the state needs no lock (one event loop), and connecting
(handshake and probe, by redis-py) runs in a background task.

Replies are pushed, not pulled: once a connection is probed, its transport hands every chunk
it receives to :class:`_Feed`, which parses it (hiredis, configured as redis-py's parser) and
gives each reply to the channel at once, from the event loop's own read callback. A fan-out
then awaits one future, resolved when its last slot is filled or at its deadline: no reader
coroutine, no future per reply, and a reply that arrives after its caller gave up is still
consumed in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

import redis.exceptions as rex

from redlease.core import _async, redispy, watch
from redlease.core.primitives import give_up_together
from redlease.core.quorum import _probe, channel
from redlease.core.quorum.executor import Blpop, Collect, QuorumExecutor, Settle, Step, Steps
from redlease.core.requests import Request, Wait
from redlease.core.waiting import LeaseOwner
from redlease.errors import LockError

_MORE = object()  # hiredis: no complete reply buffered yet


class _Feed(asyncio.Protocol):
    """The protocol of a probed connection's transport: every reply goes to the channel as it
    arrives. Connection events also reach the stream protocol it replaced, so redis-py's
    ``disconnect()`` (which waits for the stream to close) and write flow control still work.
    """

    def __init__(self, ch: Channel, conn: Any, inner: Any, reader: Any) -> None:
        self.ch = ch
        self.conn = conn
        self.inner = inner
        self.reader = reader

    def data_received(self, data: bytes) -> None:
        reader, ch, conn = self.reader, self.ch, self.conn
        reader.feed(data)
        while True:
            try:
                value = reader.gets()
            except Exception as exc:  # noqa: BLE001 - a broken stream: the channel drops it
                value = exc
            if value is _MORE or not ch._received(conn, value):
                return

    def eof_received(self) -> bool | None:
        self.ch._received(self.conn, rex.ConnectionError(f"{self.ch.name} closed the connection"))
        return self.inner.eof_received()  # type: ignore[no-any-return]

    def connection_lost(self, exc: Exception | None) -> None:
        self.ch._received(self.conn, rex.ConnectionError(f"connection to {self.ch.name} lost"))
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


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

    async def drain(self) -> None:
        """Flow control: wait while the transport's write buffer is over its high-water mark."""
        conn = self._conn
        writer = getattr(conn, redispy.WRITER, None)
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

    def overdue(self) -> None:
        """A caller's deadline passed with a reply still due: drop the connection if its oldest
        request has been unanswered for ``dead_after``."""
        if self._conn is not None:
            self._check_dead(self._conn)

    # -- driver hooks ---------------------------------------------------------------------------

    def _spawn(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"redlease-node-{self.name}"
        )

    def _write(self, conn: Any, packed: Any) -> None:
        writer = getattr(conn, redispy.WRITER, None)
        if writer is None or writer.transport.is_closing():  # never reconnect silently here
            raise self._lost()
        if len(packed) == 1:  # hiredis packed it in one piece: straight to the transport
            writer.transport.write(packed[0])
        else:
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

    async def _disconnect(self, conn: Any) -> None:
        await conn.disconnect()

    async def _run(self) -> None:
        """Background connect: handshake and probe on a connection of the channel's own, then
        the replies are pushed (:class:`_Feed`)."""
        try:
            conn = channel.own_connection(self.client)
            try:
                await conn.connect()
                probe_cmds = conn.pack_commands(_probe.COMMANDS)
                await conn.send_packed_command(probe_cmds, check_health=False)
                replies = [await _reply(conn) for _ in _probe.COMMANDS]
                probe = _probe.parse(replies, time.monotonic())
                self._push(conn)
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

    def _push(self, conn: Any) -> None:
        """From now on the transport hands what it receives to a :class:`_Feed`: a hiredis
        reader with redis-py's settings (error classes, decoding). Bytes redis-py buffered
        after the probe's replies (none are due) would be lost: the connection fails instead."""
        reader = redispy.hiredis_reader(conn, _MORE)
        if reader is None:
            raise rex.InvalidResponse(f"{self.name}: unexpected data after the probe")
        transport = getattr(conn, redispy.WRITER).transport
        transport.set_protocol(_Feed(self, conn, transport.get_protocol(), reader))


async def collect(
    pairs: Sequence[tuple[Channel, channel.Slot]],
    deadline: float,
    patience: float = 0.0,
    needed: int = 0,
) -> None:
    """Wait until every ``(channel, slot)``'s slot is filled or ``deadline``; past it, while
    fewer than ``needed`` are filled, for those whose node keeps answering
    (:class:`~redlease.core.quorum.executor.Collect`): one future for the fan-out, resolved by
    its last reply (the slots count down; past the deadline, by the ``needed``-th) or by a
    timer. Past the deadline, replies that had arrived by then were handed out already (the
    event loop runs read callbacks before timers)."""
    for ch, _ in pairs:
        writer = getattr(ch._conn, redispy.WRITER, None)
        if writer is not None and writer.transport.get_write_buffer_size():
            await ch.drain()
    due = [slot for _, slot in pairs if not slot.done]
    if not due:
        return
    loop = asyncio.get_running_loop()
    dog = watch.watchdog(loop)
    fut: asyncio.Future[None] = loop.create_future()
    left = len(due)
    enough = len(due) - max(0, needed - (len(pairs) - len(due)))  # ``left`` that will do
    late = False  # past the deadline: ``enough`` will do

    def filled() -> None:
        nonlocal left
        left -= 1
        if (not left or (late and left <= enough)) and not fut.done():
            fut.set_result(None)

    for slot in due:
        slot.then = filled
    until = deadline
    try:
        while True:
            # the loop's one reply-deadline timer (core/watch.py), not a timer per fan-out
            timer = dog.arm(loop.time() + max(0.0, until - time.monotonic()), _expire, fut)
            try:
                await fut
            finally:
                timer.close()
            late = True
            if left <= enough:
                break
            until = max(ch.late_at(deadline, patience) for ch, slot in pairs if not slot.done)
            if until <= time.monotonic():
                break
            fut = loop.create_future()
    finally:
        for slot in due:
            slot.then = None
    for ch, slot in pairs:
        if not slot.done:
            ch.overdue()


def _expire(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _reply(conn: Any) -> object:
    try:
        return await conn.read_response()
    except rex.ResponseError as exc:
        return exc


class WaitNode(_async.AsyncNode):
    """One node of a set as the asyncio driver of a quorum lock's wake-up wait (its BLPOP).
    The listener it starts gives up for the lock's waiters through ``quorum`` (the lock's
    executor): one fan-out of their GIVE_UP, judged by quorum. Its waiters
    listen apart from any other node set's on the same client: a quorum read is good only for
    the nodes it read."""

    def __init__(self, client: Any, quorum: QuorumNode) -> None:
        super().__init__(client, quorum.lock)
        self.quorum = quorum

    def listen_key(self, req: Wait) -> Hashable:
        return (req.keys, self.quorum.nodeset)

    async def give_up(self, waits: list[Wait]) -> LeaseOwner | None:
        return await self.quorum.give_up(waits)


class QuorumNode(QuorumExecutor, _async.AsyncNode):
    """The asyncio executor of one lock on a :class:`~redlease.core.quorum.NodeSet`."""

    wait_node = WaitNode
    cork = True  # one event loop: nothing submits between a fan-out's preparation and writes

    async def execute(self, req: Request) -> Any:
        return await self._run(self.steps(req))

    async def give_up(self, waits: list[Wait]) -> LeaseOwner | None:
        """Who holds the lease of ``waits`` (waiters due together) by a quorum of the nodes (one
        fan-out of their one GIVE_UP, which takes them off each node's queue where another
        owner holds the lease)."""
        return await self._run(self.owner_steps(give_up_together(waits)))  # type: ignore[no-any-return]

    async def _run(self, steps: Steps) -> Any:
        reply = None
        try:
            while True:
                reply = await self._perform(steps.send(reply))
        except StopIteration as stop:  # the steps are done: ``stop.value`` is the reply
            return stop.value

    @staticmethod
    async def _perform(step: Step) -> Any:
        if isinstance(step, Collect):
            pairs: Any = step.pairs  # this driver's channels
            await collect(pairs, step.deadline, step.patience, step.needed)
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
