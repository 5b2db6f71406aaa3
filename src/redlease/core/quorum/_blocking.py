"""Run quorum flows with blocking redis-py clients: one pipelined connection per node.

Each node has a :class:`Channel`. A fan-out writes its request to every node's connection from
the caller's thread, then the caller reads the replies itself, in order, until the per-node
deadline: no reader thread, no thread hand-off per reply. Several threads may share a channel:
whoever holds the channel's *reader role* reads the replies and hands each to the request it
belongs to (FIFO), so a reply that arrives after its caller gave up is still consumed in order
by the next reader. Because every write to a node goes down the same connection, an undo
written after an acquire that is still in flight runs after it on that node: no stale key is
left behind. Only connecting (handshake and probe) runs in a short-lived background thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import redis.exceptions as rex

from redlease.core import _sync
from redlease.core import client as _redis
from redlease.core.protocol import Request, Wait
from redlease.core.quorum import _probe
from redlease.core.quorum.flows import Batch, Command, FanOut, Marked, QFlow, Ready, Settings, run
from redlease.core.rules import LATE, Down, Probe, Reply, Result
from redlease.errors import LockError, LockUnavailable

RETRY_CONNECT = 0.25  # after a failed connect, fail fast for this long
FIRST_CONTACT = 2.0  # how long the first operation of a node set waits for connections
# Past its deadline a caller still collects replies that already arrived; if another caller
# holds the node's reader role (and is handing replies out), it waits at most this long more.
LATE_GRACE = 0.01


class Slot:
    """Where the reply to one pipelined request lands (a value or the exception it raised)."""

    __slots__ = ("done", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None

    def set(self, value: Any) -> None:
        self.value = value
        self.done = True


def lost(slot: Slot) -> bool:
    """Whether ``slot`` failed without a reply (an error reply from Redis is a reply)."""
    return isinstance(slot.value, BaseException) and not isinstance(slot.value, rex.ResponseError)


class Channel:
    """One pipelined connection to one node, reconnected on demand, read by its callers."""

    def __init__(self, client: Any, name: str, dead_after: float) -> None:
        self.client = client
        self.name = name
        self.dead_after = dead_after
        self.probe: Probe | None = None
        self._cond = threading.Condition(threading.Lock())
        self._conn: Any = None
        self._connecting = False
        self._reading = False  # some thread holds the reader role
        self._backlog: list[tuple[tuple[Any, ...], Slot]] = []
        self._inflight: deque[Slot] = deque()
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

    def submit(
        self, args: tuple[Any, ...], after: Slot | None = None, memo: Memo | None = None
    ) -> Slot:
        """Write ``args`` (or queue it until connected); the slot gets the raw reply.

        ``after``: the previous request of the same batch; if it was lost with its connection,
        this one is not sent (it must not run on a new connection without its predecessor).
        ``memo``: see :func:`pack`.
        """
        slot = Slot()
        with self._cond:
            if after is not None and lost(after):
                slot.set(after.value)
            elif self._conn is not None:
                self._send_locked(args, slot, memo)
            elif self._closed:
                slot.set(rex.ConnectionError("node set closed"))
            elif self._connecting or time.monotonic() >= self._retry_at:
                self._backlog.append((args, slot))
                self._start_locked()
            else:
                slot.set(self._error or rex.ConnectionError("not connected"))
        return slot

    def wait(self, slot: Slot, deadline: float) -> None:
        """Until ``slot`` is filled or ``deadline``: read replies (reader role) or wait for them.

        Past the deadline it still takes one pass over what has already arrived (or waits up
        to :data:`LATE_GRACE` for the thread that holds the reader role): a fan-out waits for
        its nodes one after the other, so a reply must not count as late only because an
        earlier node used up the time.
        """
        while True:
            with self._cond:
                while True:
                    if slot.done:
                        return
                    conn = self._conn
                    if conn is not None and not self._reading and self._inflight:
                        self._reading = True
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if not self._reading:
                            return
                        left += LATE_GRACE
                        if left <= 0:
                            return
                    self._cond.wait(left)
            try:
                self._read_until(conn, slot, deadline)
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()
            if time.monotonic() >= deadline:
                return

    @property
    def queued(self) -> int:
        """Requests written and not answered yet (a slow node piles them up)."""
        return len(self._inflight)

    @property
    def last_error(self) -> BaseException | None:
        return self._error

    def close(self) -> None:
        """Drop the connection (requests in flight fail); later requests fail at once."""
        with self._cond:
            self._closed = True
            if self._conn is not None:
                self._drop_locked(rex.ConnectionError("node set closed"))
            self._cond.notify_all()

    # -- internals ------------------------------------------------------------------------------

    def _start_locked(self) -> None:
        if self._conn is not None or self._connecting or self._closed:
            return
        if time.monotonic() < self._retry_at:
            return
        self._connecting = True
        threading.Thread(target=self._run, name=f"redlease-node-{self.name}", daemon=True).start()

    def _send_locked(self, args: tuple[Any, ...], slot: Slot, memo: Memo | None = None) -> None:
        conn = self._conn
        try:
            if getattr(conn, "_sock", True) is None:  # dropped: never reconnect silently here
                raise rex.ConnectionError(f"connection to {self.name} lost")
            conn.send_packed_command(pack(conn, args, memo), check_health=False)
        except Exception as exc:  # noqa: BLE001 - reported through the slot
            slot.set(exc)
            self._drop_locked(exc)
            return
        if not self._inflight:
            self._head_since = time.monotonic()
        self._inflight.append(slot)

    def _drop_locked(self, error: BaseException) -> None:
        """Close the connection; every request in flight on it fails with ``error``."""
        conn, self._conn, self.probe = self._conn, None, None
        self._error = error
        pending = list(self._inflight)
        self._inflight.clear()
        for slot in pending:
            slot.set(error)
        self._cond.notify_all()
        if conn is not None:
            conn.disconnect()  # shuts the socket down: a reader blocked on it wakes up
            self.client.connection_pool.release(conn)

    def _read_until(self, conn: Any, slot: Slot, deadline: float) -> None:
        """Reader role: hand replies to their slots in order until ``slot`` is filled."""
        while not slot.done:
            # past the deadline: only what is already there (CPython polls >= 1 ms)
            left = max(deadline - time.monotonic(), 1e-6)
            try:
                sock = conn._sock
                if sock is None:
                    raise rex.ConnectionError(f"connection to {self.name} lost")
                sock.settimeout(left)  # bounds this read, partial replies included
                value: Any = conn.read_response(disconnect_on_error=False)
            except rex.ResponseError as exc:
                value = exc
            except rex.TimeoutError:
                self._check_dead(conn)
                return
            except Exception as exc:  # noqa: BLE001 - the connection is gone
                with self._cond:
                    if self._conn is conn:
                        self._drop_locked(exc)
                return
            with self._cond:
                if self._conn is not conn:  # dropped meanwhile: the slots were failed
                    return
                self._inflight.popleft().set(value)
                self._head_since = time.monotonic()
                self._cond.notify_all()

    def _check_dead(self, conn: Any) -> None:
        """Drop ``conn`` if its oldest request has been unanswered for ``dead_after``."""
        with self._cond:
            if (
                self._conn is conn
                and self._inflight
                and time.monotonic() - self._head_since > self.dead_after
            ):
                self._drop_locked(rex.TimeoutError(f"no reply for {self.dead_after:g}s"))

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
        """Background connect: handshake, probe, then write what was queued meanwhile."""
        try:
            conn, probe = self._connect()
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the waiters
            with self._cond:
                self._connecting = False
                self._retry_at = time.monotonic() + RETRY_CONNECT
                self._error = exc
                backlog, self._backlog = self._backlog, []
                for _, slot in backlog:
                    slot.set(exc)
                self._cond.notify_all()
            return
        with self._cond:
            self._connecting = False
            if self._closed:
                conn.disconnect()
                self.client.connection_pool.release(conn)
                error = rex.ConnectionError("node set closed")
                for _, slot in self._backlog:
                    slot.set(error)
                self._backlog = []
                self._cond.notify_all()
                return
            self._conn, self.probe, self._error = conn, probe, None
            backlog, self._backlog = self._backlog, []
            for args, slot in backlog:
                if self._conn is None:
                    slot.set(self._error or rex.ConnectionError(f"connection to {self.name} lost"))
                else:
                    self._send_locked(args, slot)
            self._cond.notify_all()


def to_result(lock: str, node: str, slots: list[Slot], batch: bool) -> Result:
    """What the slots of one node's requests say: a reply, a failure, or late."""
    if not slots[-1].done:
        return LATE
    values = []
    for slot in slots:
        if isinstance(slot.value, BaseException):
            return Down(node_error(slot.value, lock, node))
        values.append(slot.value)
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


Memo = dict[Any, Any]


def pack(conn: Any, args: tuple[Any, ...], memo: Memo | None) -> Any:
    """``conn.pack_command(*args)``, packed once per fan-out for nodes whose encoders agree.

    ``memo`` lives for one fan-out (so ``id(args)`` is stable): the same request to three
    nodes is packed once instead of three times (pure Python in redis-py's asyncio client).
    """
    enc = getattr(conn, "encoder", None)
    if memo is None or enc is None:
        return conn.pack_command(*args)
    key = (id(args), getattr(enc, "encoding", None), getattr(enc, "encoding_errors", None))
    out = memo.get(key)
    if out is None:
        out = memo[key] = conn.pack_command(*args)
    return out


def submit_all(channel: Any, reqs: Batch, memo: Memo) -> list[Slot]:
    """Write a node's requests in order; after a lost one the rest are not sent."""
    slots: list[Slot] = []
    for r in reqs:
        args = memo.get(id(r))
        if args is None:
            args = memo[id(r)] = call_args(r)
        slots.append(channel.submit(args, slots[-1] if slots else None, memo))
    return slots


class QuorumNode(_sync.SyncNode):
    """The blocking executor of one lock on a :class:`~redlease.core.quorum.NodeSet`.

    It stands where a :class:`redlease.core._sync.SyncNode` stands in a lock handle, so every
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
        """Write to every node first, then read the replies up to one shared deadline."""
        channels = self.nodeset.channels()
        slots: dict[int, list[Slot]] = {}
        memo: Memo = {}
        for i, req in step.calls.items():
            slots[i] = submit_all(channels[i], req if isinstance(req, tuple) else (req,), memo)
        if step.timeout > 0:
            deadline = time.monotonic() + step.timeout
            for i in sorted(slots, key=lambda i: channels[i].queued):  # slow nodes last
                channels[i].wait(slots[i][-1], deadline)
        return {
            i: to_result(self.lock, channels[i].name, ss, isinstance(step.calls[i], tuple))
            for i, ss in slots.items()
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
