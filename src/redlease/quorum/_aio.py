"""Run quorum flows with asyncio redis-py clients: one pipelined connection per node.

The asyncio twin of :mod:`redlease.quorum._blocking` (same flows, same decisions): requests are
written in order on one connection per node and a reader task matches replies to futures.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from typing import Any

import redis.exceptions as rex

from redlease import _async
from redlease.errors import LockError
from redlease.protocol import Request, Wait
from redlease.quorum import _probe
from redlease.quorum._blocking import (
    FIRST_CONTACT,
    RETRY_CONNECT,
    call_args,
    node_error,
    settled,
)
from redlease.quorum.flows import Batch, FanOut, Marked, QFlow, Ready, Settings, run
from redlease.validity import LATE, Down, Probe, Reply, Result


class Channel:
    """One pipelined asyncio connection to one node, reconnected on demand."""

    def __init__(self, client: Any, name: str, dead_after: float) -> None:
        self.client = client
        self.name = name
        self.dead_after = dead_after
        self.probe: Probe | None = None
        self._conn: Any = None
        self._task: asyncio.Task[None] | None = None
        self._backlog: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._inflight: deque[asyncio.Future[Any]] = deque()
        self._send_lock = asyncio.Lock()
        self._more = asyncio.Event()
        self._settled = asyncio.Event()
        self._retry_at = 0.0
        self._error: BaseException | None = None
        self._closed = False

    def start(self) -> None:
        if self._conn is not None or self._task is not None or self._closed:
            return
        if time.monotonic() < self._retry_at:
            return
        self._settled.clear()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"redlease-node-{self.name}"
        )

    async def wait_settled(self, deadline: float) -> Probe | None:
        if self._task is not None and self._conn is None:
            left = deadline - time.monotonic()
            if left > 0:
                try:
                    async with asyncio.timeout(left):
                        await self._settled.wait()
                except TimeoutError:
                    pass
        return self.probe if self._conn is not None else None

    async def submit(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._conn is not None:
            async with self._send_lock:
                await self._send(args, fut)
        elif self._closed:
            fut.set_exception(rex.ConnectionError("node set closed"))
        elif self._task is not None or time.monotonic() >= self._retry_at:
            self._backlog.append((args, fut))
            self.start()
        else:
            fut.set_exception(self._error or rex.ConnectionError("not connected"))
        return fut

    async def _send(self, args: tuple[Any, ...], fut: asyncio.Future[Any]) -> None:
        conn = self._conn
        if conn is None or not conn.is_connected:
            fut.set_exception(self._error or rex.ConnectionError(f"connection to {self.name} lost"))
            return
        try:
            await conn.send_packed_command(conn.pack_command(*args), check_health=False)
        except Exception as exc:  # noqa: BLE001 - reported through the future
            fut.set_exception(exc)
            self._error = exc
            self._more.set()
            return
        self._inflight.append(fut)
        self._more.set()

    @property
    def last_error(self) -> BaseException | None:
        return self._error

    async def close(self) -> None:
        self._closed = True
        self._more.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

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
        try:
            conn, probe = await self._connect()
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the waiters
            self._task = None
            self._retry_at = time.monotonic() + RETRY_CONNECT
            self._error = exc
            backlog, self._backlog = self._backlog, []
            self._settled.set()
            for _, fut in backlog:
                if not fut.done():
                    fut.set_exception(exc)
            return
        self._conn, self.probe, self._error = conn, probe, None
        async with self._send_lock:
            backlog, self._backlog = self._backlog, []
            for args, fut in backlog:
                await self._send(args, fut)
        self._settled.set()
        error: BaseException
        try:
            error = await self._read_loop(conn)
        except asyncio.CancelledError:
            error = rex.ConnectionError("node set closed")
            raise
        finally:
            self._conn, self.probe, self._task = None, None, None
            pending = list(self._inflight)
            self._inflight.clear()
            for fut in pending:
                if not fut.done():
                    fut.set_exception(error)
            await conn.disconnect()
            await self.client.connection_pool.release(conn)

    async def _read_loop(self, conn: Any) -> BaseException:
        while True:
            while not self._inflight and not self._closed and self._error is None:
                self._more.clear()
                await self._more.wait()
            if self._closed:
                return rex.ConnectionError("node set closed")
            if self._error is not None:
                return self._error
            try:
                async with asyncio.timeout(self.dead_after):
                    value: Any = await conn.read_response(timeout=math.inf)
            except rex.ResponseError as exc:
                value = exc
            except TimeoutError:
                return rex.TimeoutError(f"no reply for {self.dead_after:g}s")
            except Exception as exc:  # noqa: BLE001 - the connection is gone
                return exc
            fut = self._inflight.popleft()
            if not fut.done():
                fut.set_result(value)


def to_result(lock: str, node: str, futs: list[asyncio.Future[Any]], batch: bool) -> Result:
    if not all(f.done() for f in futs):
        return LATE
    values = []
    for f in futs:
        value = f.exception() or f.result()
        if isinstance(value, BaseException):
            return Down(node_error(value, lock, node))
        values.append(value)
    return Reply(values if batch else values[0])


class QuorumNode(_async.AsyncNode):
    """The asyncio executor of one lock on a :class:`~redlease.quorum.NodeSet`."""

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
        # the first contact needs a handshake and a probe: give it more than one round trip
        deadline = time.monotonic() + (max(timeout, FIRST_CONTACT) if first_use else timeout)
        probes = await asyncio.gather(*(ch.wait_settled(deadline) for ch in channels))
        return [settled(self.lock, ch, p) for ch, p in zip(channels, probes, strict=True)]

    async def _fan_out(self, step: FanOut) -> dict[int, Result]:
        channels = self.nodeset.achannels()
        futs: dict[int, list[asyncio.Future[Any]]] = {}
        for i, req in step.calls.items():
            reqs: Batch = req if isinstance(req, tuple) else (req,)
            futs[i] = [await channels[i].submit(call_args(r)) for r in reqs]
        every = [f for fs in futs.values() for f in fs]
        if step.timeout > 0 and every:
            await asyncio.wait(every, timeout=step.timeout)
        return {
            i: to_result(self.lock, channels[i].name, fs, isinstance(step.calls[i], tuple))
            for i, fs in futs.items()
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
