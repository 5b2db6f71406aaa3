"""One pipelined connection to one quorum node: the state machine both drivers share.

A :class:`Channel` holds the bookkeeping and makes every decision: requests written while
connecting wait in a backlog; written requests wait in a FIFO of :class:`Slot` s, one per reply;
each reply goes to the oldest slot (:meth:`Channel._received`), so a reply that arrives after
its caller gave up is still consumed in order; a connection
whose oldest request stays unanswered for ``dead_after`` is dropped and every request in flight
on it fails; after a failed connect, requests fail fast for :data:`RETRY_CONNECT`.

Because every write to a node goes down this one connection, an undo written behind an
acquire that is still in flight runs after it on that node: no stale key is left behind.

The drivers (:mod:`._sync`: threads and a condition variable; :mod:`._async`: asyncio futures)
only do the I/O and the blocking: they connect in the background (hook :meth:`Channel._spawn`),
write bytes (:meth:`Channel._write`), close a dropped connection (:meth:`Channel._dispose`),
wake waiting callers (:meth:`Channel._notify` on a connection event; a reply wakes only the
caller it is for, through :attr:`Slot.then`) and read replies. The blocking driver's callers
read the replies themselves, one caller at a time holding the *reader role*: they ask the state
machine what to do next (:meth:`Channel._claim_locked`: stop, wait for a wake-up at most so
long, or read from this connection as the reader) and report what they read
(:meth:`Channel._received`, :meth:`Channel._reader_done`, :meth:`Channel._check_dead`); a
reader that is done hands the role to one waiting caller (:meth:`Channel._hand_over`). The
asyncio driver's transport hands every reply to :meth:`Channel._received` as it arrives, and a
caller past its deadline asks :meth:`Channel._check_dead`.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlease.core import wire
from redlease.core.restart import Probe

RETRY_CONNECT = 0.25  # after a failed connect, fail fast for this long
FIRST_CONTACT = 2.0  # how long the first operation of a node set waits for connections
# Past its deadline a caller still collects replies that already arrived; if another caller
# holds the node's reader role (and is handing replies out), it waits at most this long more.
# A reader waiting on a silent node also looks up at least this often, to say how long the
# node has been silent (:meth:`Channel._claim_locked`).
LATE_GRACE = 0.01

Memo = dict[Any, Any]


def own_connection(client: Any) -> Any:
    """A connection for one channel, made with ``client``'s settings (its pool's connection
    class and arguments: TLS, credentials, a Sentinel-managed or consent-checked class) but not
    lent by the pool, and connected in one attempt: the channel's own back-off
    (:data:`RETRY_CONNECT`) is the retry policy. With redis-py's default (three retries with
    back-off) a dead node's connect outlived ``node_timeout``, so every acquire waited out the
    node timeout and every release two (tests/core/quorum/test_quorum.py,
    ``test_a_dead_node_costs_no_node_timeout``)."""
    pool = client.connection_pool
    conn = pool.connection_class(**pool.connection_kwargs)
    conn.retry = Retry(NoBackoff(), 0)
    return conn


class Slot:
    """Where the reply to one pipelined request lands (a value or the exception it raised).

    ``then``: called once the slot is filled (a driver that waits for several slots at once
    counts them down with it), None for nothing.
    """

    __slots__ = ("done", "then", "value")

    def __init__(self) -> None:
        self.done = False
        self.value: Any = None
        self.then: Any = None

    def set(self, value: Any) -> None:
        self.value = value
        self.done = True
        if self.then is not None:
            self.then()


def lost(slot: Slot) -> bool:
    """Whether ``slot`` failed without a reply (an error reply from Redis is a reply)."""
    return isinstance(slot.value, BaseException) and not isinstance(slot.value, rex.ResponseError)


def pack(conn: Any, args: tuple[Any, ...], memo: Memo | None) -> Any:
    """``args`` packed for ``conn`` (:func:`redlease.core.wire.pack`), once per fan-out for
    nodes whose encoders agree.

    ``memo`` lives for one fan-out (so ``id(args)`` is stable): the same request to three
    nodes is packed once instead of three times (pure Python in redis-py).
    """
    enc = getattr(conn, "encoder", None)
    if memo is None or enc is None:
        return wire.pack(conn, args)
    key = (id(args), getattr(enc, "encoding", None), getattr(enc, "encoding_errors", None))
    out = memo.get(key)
    if out is None:
        out = memo[key] = wire.pack(conn, args)
    return out


Corked = tuple["Channel", Any, Any]  # (channel, connection, packed bytes) of a corked write


def flush(corked: list[Corked]) -> None:
    """Write what :meth:`Channel.submit` corked, in order."""
    for ch, conn, packed in corked:
        try:
            ch._write(conn, packed)
        except Exception as exc:  # noqa: BLE001 - reported through the slots
            ch._write_failed(conn, exc)


class Channel:
    """One pipelined connection to one node, reconnected on demand, read by its callers.

    ``lock`` guards the state (the blocking driver's :class:`threading.Condition`; the asyncio
    driver's state lives in one thread and its lock is never contended). Every method that
    changes the state takes it, except the ``_locked`` ones, which are called with it held.
    """

    def __init__(
        self, client: Any, name: str, dead_after: float, lock: AbstractContextManager[Any]
    ) -> None:
        self.client = client
        self.name = name
        self.dead_after = dead_after
        # (probe, epoch): what the server said on the current connection (None: not connected)
        # and which connection that is; replaced as a whole, so it is read without the lock
        self.view: tuple[Probe | None, int] = (None, 0)
        self._lock = lock
        self._conn: Any = None
        self._connecting = False
        self._reading = False  # some caller holds the reader role
        self._sleepers = 0  # callers waiting for a wake-up (kept by the drivers)
        self._backlog: list[tuple[tuple[Any, ...], Slot]] = []
        self._inflight: deque[Slot] = deque()
        self._head_since = 0.0  # when the oldest request in flight was written or last answered
        # until when a reader found the node silent (a read that timed out): no reply arrived
        # between the last one handed out and then
        self._quiet_until = 0.0
        self._retry_at = 0.0
        self._error: BaseException | None = None
        self._closed = False

    # -- what a driver provides -----------------------------------------------------------------

    def _spawn(self) -> None:
        """Start connecting in the background; it ends in :meth:`_connected` or
        :meth:`_connect_failed`."""
        raise NotImplementedError

    def _write(self, conn: Any, packed: Any) -> None:
        """Write packed bytes to ``conn`` without waiting; raise if the connection is gone."""
        raise NotImplementedError

    def _dispose(self, conn: Any) -> None:
        """Close a dropped connection (a reader blocked on it must wake up)."""
        raise NotImplementedError

    def _notify(self) -> None:
        """Wake every caller waiting on this channel (lock held; see ``_sleepers``): the
        connection changed (connected, failed, dropped, closed). A reply wakes only the caller
        it is for (through its :attr:`Slot.then`), not everyone."""
        raise NotImplementedError

    def _hand_over(self) -> None:
        """The reader role is free with requests in flight: wake one caller waiting for a
        reply, to take it (lock held; the blocking driver, whose callers read)."""
        self._notify()

    # -- callers --------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background unless connected, connecting or backing off."""
        with self._lock:
            self._start_locked()

    def submit(
        self,
        args: tuple[Any, ...],
        after: Slot | None = None,
        memo: Memo | None = None,
        epoch: int | None = None,
        corked: list[Corked] | None = None,
    ) -> Slot:
        """Write ``args`` (or queue it until connected); the slot gets the raw reply.

        The bytes are on their way, in order, when it returns. ``after``: the previous request
        of the same batch; if it was lost with its connection, this one is not sent (it must
        not run on a new connection without its predecessor). ``memo``: see :func:`pack`.
        ``epoch``: send only on that connection (see :attr:`view`), else fail at once: a
        decision made on one server's probe must not be carried out by a server that replaced
        it (restarted without its data, say). ``corked``: the bytes are added to this list
        instead, and the caller writes them with :func:`flush` before anyone else can submit
        (the asyncio driver: nothing runs in between), so that a fan-out's writes to its
        nodes follow each other with no bookkeeping between them.
        """
        slot = Slot()
        with self._lock:
            if after is not None and lost(after):
                slot.set(after.value)
            elif epoch is not None and (self._conn is None or epoch != self.view[1]):
                slot.set(rex.ConnectionError(f"{self.name} was reconnected since its probe"))
            elif self._conn is not None:
                if corked is None:
                    self._send_locked(args, slot, memo)
                else:
                    conn = self._conn
                    corked.append((self, conn, pack(conn, args, memo)))
                    self._sent_locked(slot)
            elif self._closed:
                slot.set(rex.ConnectionError("node set closed"))
            elif self._connecting or time.monotonic() >= self._retry_at:
                self._backlog.append((args, slot))
                self._start_locked()
            else:
                slot.set(self._error or rex.ConnectionError("not connected"))
        return slot

    def submit_many(
        self,
        requests: list[tuple[Any, ...]],
        memo: Memo | None = None,
        epoch: int | None = None,
        corked: list[Corked] | None = None,
    ) -> list[Slot] | None:
        """Write ``requests`` in one write (one send) on the current connection: their slots, in
        order. None when there is no connection to write them on now (connecting, failed, or
        not connection ``epoch``): the caller submits them one by one (:meth:`submit`), which
        queues or fails them. ``memo``, ``epoch``, ``corked``: see :meth:`submit`."""
        with self._lock:
            conn = self._conn
            if conn is None or (epoch is not None and epoch != self.view[1]):
                return None
            packed = [b"".join(part for args in requests for part in pack(conn, args, memo))]
            slots = [Slot() for _ in requests]
            if corked is not None:
                corked.append((self, conn, packed))
            else:
                try:
                    self._write(conn, packed)
                except Exception as exc:  # noqa: BLE001 - reported through the slots
                    for slot in slots:
                        slot.set(exc)
                    self._drop_locked(exc)
                    return slots
            for slot in slots:
                self._sent_locked(slot)
            return slots

    @property
    def probe(self) -> Probe | None:
        """What the server said on the current connection (None: not connected)."""
        return self.view[0]

    def remark(self, epoch: int, probe: Probe) -> None:
        """The node's marker now reads as in ``probe`` (if still on connection ``epoch``)."""
        with self._lock:
            current, now = self.view
            if now == epoch and current is not None and current.run_id == probe.run_id:
                self.view = (replace(current, marker=probe.marker, born=probe.born), epoch)

    @property
    def queued(self) -> int:
        """Requests written and not answered yet (a slow node piles them up)."""
        return len(self._inflight)

    @property
    def last_error(self) -> BaseException | None:
        return self._error

    # -- where callers wait: the drivers ask, then block or await as told -------------------------

    def _settle_locked(self, deadline: float) -> float | None:
        """While connecting: the seconds to wait for a wake-up (None: settled, or too late)."""
        if not self._connecting or self._closed:
            return None
        left = deadline - time.monotonic()
        return left if left > 0 else None

    def late_at(self, deadline: float, patience: float) -> float:
        """When a request written to this node and not answered yet counts as late: at
        ``deadline``, or later while the node keeps answering the requests written before it
        (this process's own queue on the connection: not the node's delay) until it has been
        silent for ``patience`` (the per-node timeout). The time queued behind this client's
        own requests counts against the caller, never as the node's failure; a node that
        stops answering is late ``patience`` after its last reply, as before."""
        if self._conn is None or not self._inflight:
            return deadline
        return max(deadline, self._head_since + patience)

    def _claim_locked(self, slot: Slot, deadline: float, patience: float = 0.0) -> Any:
        """What a caller waiting for ``slot`` until ``deadline`` does next: None (stop: filled,
        or too late), seconds (wait that long for a wake-up), or a connection (the caller now
        holds the reader role: read from it with :meth:`_received`, then :meth:`_reader_done`).
        ``deadline`` moves on while the node keeps answering (:meth:`late_at`).

        Past the deadline the caller still takes one pass over what has already arrived (or
        waits up to :data:`LATE_GRACE` for the caller that holds the reader role): a fan-out
        waits for its nodes one after the other, so a reply must not count as late only because
        an earlier node used up the time. A node is silent for ``patience`` only when a read
        found it so (:attr:`_quiet_until`), not when the reader handed nothing out for that
        long: a reader kept from running (hundreds of threads on the GIL, a busy machine)
        hands out replies the node sent in time, and that lag is this process's own.
        """
        if slot.done:
            return None
        conn = self._conn
        if conn is not None and not self._reading and self._inflight:
            self._reading = True
            return conn
        late = self.late_at(deadline, patience)
        left = late - time.monotonic()
        if left <= 0:
            if not self._reading:
                return None
            if patience > 0:  # the reader wakes this caller when it finds the node silent
                return None if self._quiet_until >= late else max(patience, LATE_GRACE)
            left += LATE_GRACE
            if left <= 0:
                return None
        return left

    def _reader_done(self, slot: Slot, deadline: float, patience: float = 0.0) -> bool:
        """Give the reader role back (to a waiting caller, if requests are in flight); whether
        to go on waiting for ``slot`` (not late: :meth:`_read_until` of the driver returns
        when its read found the node silent past the lateness, or with the slot filled)."""
        with self._lock:
            self._reading = False
            if self._inflight:
                self._hand_over()
            return not slot.done and self._quiet_until < self.late_at(deadline, patience)

    # -- what the drivers report ------------------------------------------------------------------

    def _received(self, conn: Any, value: Any) -> bool:
        """The reader read ``value`` from ``conn`` (a reply, or the exception reading raised):
        hand it to the oldest slot. False: stop reading (the connection is gone)."""
        with self._lock:
            if self._conn is not conn:  # dropped meanwhile: its slots were failed
                return False
            if isinstance(value, BaseException) and not isinstance(value, rex.ResponseError):
                self._drop_locked(value)
                return False
            if not self._inflight:  # a reply nobody asked for: the stream is out of step
                self._drop_locked(rex.InvalidResponse(f"unexpected reply from {self.name}"))
                return False
            self._head_since = time.monotonic()
            self._inflight.popleft().set(value)  # wakes the caller waiting for it (``then``)
            return True

    def _check_dead(self, conn: Any, quiet_until: float | None = None) -> None:
        """A read timed out: drop ``conn`` if its oldest request is unanswered for too long.
        ``quiet_until``: the read found no reply until then (the reader role's reads); callers
        waiting past their lateness are told (:meth:`_silent`)."""
        with self._lock:
            if self._conn is not conn:
                return
            if quiet_until is not None and quiet_until > self._quiet_until:
                self._quiet_until = quiet_until
                self._silent(quiet_until)
            if self._inflight and time.monotonic() - self._head_since > self.dead_after:
                self._drop_locked(rex.TimeoutError(f"no reply for {self.dead_after:g}s"))

    def _silent(self, until: float) -> None:
        """The node was found silent until ``until``: wake the callers late by then (lock
        held; the blocking driver, whose callers wait for the reader)."""

    def _connected(self, conn: Any, probe: Probe) -> None:
        """Background connect done: write what was queued meanwhile (or give up if closed)."""
        with self._lock:
            self._connecting = False
            if self._closed:
                self._fail_backlog_locked(rex.ConnectionError("node set closed"))
                self._notify()
                self._dispose(conn)
                return
            self._conn, self._error = conn, None
            self.view = (probe, self.view[1] + 1)
            backlog, self._backlog = self._backlog, []
            for args, slot in backlog:
                if self._conn is None:  # the connection broke while writing the backlog
                    slot.set(self._error or self._lost())
                else:
                    self._send_locked(args, slot)
            self._notify()

    def _connect_failed(self, error: BaseException) -> None:
        """Background connect failed: fail what was queued; fail fast for a while."""
        with self._lock:
            self._connecting = False
            self._retry_at = time.monotonic() + RETRY_CONNECT
            self._error = error
            self._fail_backlog_locked(error)
            self._notify()

    def _close(self) -> None:
        """Drop the connection (requests in flight fail); later requests fail at once."""
        with self._lock:
            self._closed = True
            error = rex.ConnectionError("node set closed")
            if self._conn is not None:
                self._drop_locked(error)
            self._fail_backlog_locked(error)
            self._notify()

    # -- internals (lock held) --------------------------------------------------------------------

    def _lost(self) -> rex.ConnectionError:
        return rex.ConnectionError(f"connection to {self.name} lost")

    def _start_locked(self) -> None:
        if self._conn is not None or self._connecting or self._closed:
            return
        if time.monotonic() < self._retry_at:
            return
        self._connecting = True
        self._spawn()

    def _send_locked(self, args: tuple[Any, ...], slot: Slot, memo: Memo | None = None) -> None:
        conn = self._conn
        try:
            self._write(conn, pack(conn, args, memo))
        except Exception as exc:  # noqa: BLE001 - reported through the slot
            slot.set(exc)
            self._drop_locked(exc)
            return
        self._sent_locked(slot)

    def _sent_locked(self, slot: Slot) -> None:
        if not self._inflight:
            self._head_since = time.monotonic()
        self._inflight.append(slot)

    def _write_failed(self, conn: Any, error: BaseException) -> None:
        """A corked write to ``conn`` failed: the requests in flight on it fail."""
        with self._lock:
            if self._conn is conn:
                self._drop_locked(error)

    def _drop_locked(self, error: BaseException) -> None:
        """Close the connection; every request in flight on it fails with ``error``."""
        conn, self._conn = self._conn, None
        self.view = (None, self.view[1])
        self._error = error
        pending = list(self._inflight)
        self._inflight.clear()
        for slot in pending:
            slot.set(error)
        self._notify()
        if conn is not None:
            self._dispose(conn)

    def _fail_backlog_locked(self, error: BaseException) -> None:
        backlog, self._backlog = self._backlog, []
        for _, slot in backlog:
            slot.set(error)
