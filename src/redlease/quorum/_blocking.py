"""Run quorum flows with blocking redis-py clients: one pipelined connection per node.

Each node has a :class:`Channel`: requests are written on one connection in the caller's thread
(no round trip is waited for there) and a reader thread per node matches replies to futures in
order. A fan-out therefore costs one round trip to the slowest answering node, not N. Because
every write to a node goes down the same connection, an undo written after an acquire that is
still in flight runs after it on that node: no stale key is left behind.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections import deque
from typing import Any

import redis.exceptions as rex

from redlease import _redis, _sync
from redlease.errors import LockError, LockUnavailable
from redlease.protocol import Request, Wait
from redlease.quorum import _probe
from redlease.quorum.flows import Batch, Command, FanOut, Marked, QFlow, Ready, Settings, run
from redlease.validity import LATE, Down, Probe, Reply, Result

RETRY_CONNECT = 0.25  # after a failed connect, fail fast for this long
FIRST_CONTACT = 2.0  # how long the first operation of a node set waits for connections


class Channel:
    """One pipelined connection to one node, reconnected on demand."""

    def __init__(self, client: Any, name: str, dead_after: float) -> None:
        self.client = client
        self.name = name
        self.dead_after = dead_after
        self.probe: Probe | None = None
        self._cond = threading.Condition()
        self._conn: Any = None
        self._connecting = False
        self._backlog: list[tuple[tuple[Any, ...], cf.Future[Any]]] = []
        self._inflight: deque[cf.Future[Any]] = deque()
        self._head_since = 0.0
        self._retry_at = 0.0
        self._error: BaseException | None = None
        self._closed = False

    # -- callers --------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background unless connected, connecting or backing off."""
        with self._cond:
            self._start_locked()

    def wait_settled(self, deadline: float) -> Probe | None:
        """Wait until connected (return the probe) or failed/``deadline`` (return None)."""
        with self._cond:
            while self._connecting and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self.probe if self._conn is not None else None

    def submit(self, args: tuple[Any, ...]) -> cf.Future[Any]:
        """Write ``args`` (or queue it until connected); the future gets the raw reply."""
        fut: cf.Future[Any] = cf.Future()
        with self._cond:
            if self._conn is not None:
                self._send_locked(args, fut)
            elif self._closed:
                fut.set_exception(rex.ConnectionError("node set closed"))
            elif self._connecting or time.monotonic() >= self._retry_at:
                self._backlog.append((args, fut))
                self._start_locked()
            else:
                fut.set_exception(self._error or rex.ConnectionError("not connected"))
        return fut

    @property
    def last_error(self) -> BaseException | None:
        return self._error

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- internals ------------------------------------------------------------------------------

    def _start_locked(self) -> None:
        if self._conn is not None or self._connecting or self._closed:
            return
        if time.monotonic() < self._retry_at:
            return
        self._connecting = True
        threading.Thread(target=self._run, name=f"redlease-node-{self.name}", daemon=True).start()

    def _send_locked(self, args: tuple[Any, ...], fut: cf.Future[Any]) -> None:
        conn = self._conn
        try:
            if getattr(conn, "_sock", True) is None:  # dropped by the reader: never reconnect here
                raise rex.ConnectionError(f"connection to {self.name} lost")
            conn.send_packed_command(conn.pack_command(*args), check_health=False)
        except Exception as exc:  # noqa: BLE001 - reported through the future
            fut.set_exception(exc)
            self._error = exc
            self._cond.notify_all()
            return
        if not self._inflight:
            self._head_since = time.monotonic()
        self._inflight.append(fut)
        self._cond.notify_all()

    def _connect(self) -> tuple[Any, Probe]:
        pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            for cmd in _probe.COMMANDS:
                conn.send_command(*cmd, check_health=False)
            replies: list[object] = []
            for _ in _probe.COMMANDS:
                try:
                    replies.append(conn.read_response())
                except rex.ResponseError as exc:
                    replies.append(exc)
            return conn, _probe.parse(replies, time.monotonic())
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise

    def _run(self) -> None:
        try:
            conn, probe = self._connect()
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the waiters
            with self._cond:
                self._connecting = False
                self._retry_at = time.monotonic() + RETRY_CONNECT
                self._error = exc
                backlog, self._backlog = self._backlog, []
                self._cond.notify_all()
            for _, fut in backlog:
                fut.set_exception(exc)
            return
        with self._cond:
            self._conn, self.probe, self._connecting, self._error = conn, probe, False, None
            backlog, self._backlog = self._backlog, []
            for args, fut in backlog:
                self._send_locked(args, fut)
            self._cond.notify_all()
        error = self._read_loop(conn)
        with self._cond:
            self._conn, self.probe = None, None
            pending = list(self._inflight)
            self._inflight.clear()
            self._cond.notify_all()
        for fut in pending:
            fut.set_exception(error)
        conn.disconnect()
        self.client.connection_pool.release(conn)

    def _read_loop(self, conn: Any) -> BaseException:
        while True:
            with self._cond:
                while not self._inflight and not self._closed and self._error is None:
                    self._cond.wait()
                if self._closed:
                    return rex.ConnectionError("node set closed")
                if self._error is not None:
                    return self._error
                since = self._head_since
            try:
                if not conn.can_read(timeout=0.05):
                    if time.monotonic() - since > self.dead_after:
                        return rex.TimeoutError(f"no reply for {self.dead_after:g}s")
                    continue
                value: Any = conn.read_response()
            except rex.ResponseError as exc:
                value = exc
            except Exception as exc:  # noqa: BLE001 - the connection is gone
                return exc
            with self._cond:
                fut = self._inflight.popleft()
                self._head_since = time.monotonic()
            fut.set_result(value)


def to_result(lock: str, node: str, futs: list[cf.Future[Any]], batch: bool) -> Result:
    """What the futures of one node's requests say: a reply, a failure, or late."""
    if not all(f.done() for f in futs):
        return LATE
    values = []
    for f in futs:
        exc = f.exception()
        value = exc if exc is not None else f.result()
        if isinstance(value, BaseException):
            return Down(node_error(value, lock, node))
        values.append(value)
    return Reply(values if batch else values[0])


def settled(lock: str, channel: Any, probe: Probe | None) -> Probe | Down | None:
    """A channel's probe, or why it has none (None: still connecting)."""
    if probe is not None:
        return probe
    error = channel.last_error
    return Down(node_error(error, lock, channel.name)) if error is not None else None


def node_error(exc: BaseException, lock: str, node: str) -> LockError:
    mapped = _redis.translate(exc, lock, node)
    return mapped if mapped is not None else LockUnavailable(lock, str(exc), nodes=[node])


def call_args(req: Any) -> tuple[Any, ...]:
    """The Redis command for a :class:`Call` (EVALSHA: scripts are preloaded) or Command."""
    if isinstance(req, Command):
        return req.args
    return ("EVALSHA", req.script.sha, len(req.keys), *req.keys, *req.args)


class QuorumNode(_sync.SyncNode):
    """The blocking executor of one lock on a :class:`~redlease.quorum.NodeSet`.

    It stands where a :class:`redlease._sync.SyncNode` stands in a lock handle, so every
    primitive runs unchanged: each request becomes a quorum flow.
    """

    def __init__(self, nodeset: Any, settings: Settings) -> None:
        self.client = nodeset
        self.lock = settings.prim.name
        self.name = nodeset.description
        self.cluster = False
        self.socket_timeout = nodeset.socket_timeout
        self.nodeset = nodeset
        self.settings = settings
        self._waiters = [_sync.SyncNode(c, self.lock) for c in nodeset.clients]
        self._next_wait = settings.rng.randrange(len(self._waiters))

    def execute(self, req: Request) -> Any:
        if isinstance(req, Wait):
            return self._wait(req)
        return self._drive(run(self.settings, req))

    def _drive(self, flow: QFlow) -> Any:
        reply: Any = None
        while True:
            try:
                step = flow.send(reply)
            except StopIteration as stop:
                return stop.value
            if isinstance(step, FanOut):
                reply = self._fan_out(step)
            elif isinstance(step, Ready):
                reply = self._ready(step.timeout)
            elif isinstance(step, Marked):
                self.nodeset.marked(step.index, step.run_id)
                reply = None
            else:  # pragma: no cover - flows yield nothing else
                raise TypeError(step)

    def _ready(self, timeout: float) -> list[Probe | Down | None]:
        channels = self.nodeset.channels()
        first_use = all(ch.probe is None for ch in channels)
        for ch in channels:
            ch.start()
        # the first contact needs a handshake and a probe: give it more than one round trip
        deadline = time.monotonic() + (max(timeout, FIRST_CONTACT) if first_use else timeout)
        return [settled(self.lock, ch, ch.wait_settled(deadline)) for ch in channels]

    def _fan_out(self, step: FanOut) -> dict[int, Result]:
        channels = self.nodeset.channels()
        futs: dict[int, list[cf.Future[Any]]] = {}
        for i, req in step.calls.items():
            reqs: Batch = req if isinstance(req, tuple) else (req,)
            futs[i] = [channels[i].submit(call_args(r)) for r in reqs]
        if step.timeout > 0:
            cf.wait([f for fs in futs.values() for f in fs], timeout=step.timeout)
        return {
            i: to_result(self.lock, channels[i].name, fs, isinstance(step.calls[i], tuple))
            for i, fs in futs.items()
        }

    def _wait(self, req: Wait) -> bool:
        """BLPOP the wake list on one reachable node (rotating on failure); bounded fallback."""
        n = len(self._waiters)
        for k in range(n):
            node = self._waiters[(self._next_wait + k) % n]
            if self.nodeset.channels()[(self._next_wait + k) % n].probe is None:
                continue
            try:
                return bool(node.execute(req))
            except LockError:
                self._next_wait = (self._next_wait + k + 1) % n
        time.sleep(min(req.timeout, 0.05))
        return False
