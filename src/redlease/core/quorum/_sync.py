"""The blocking driver of the quorum transport: redis-py connections, threads, a condition.

The state machine and the flow driving are shared (:mod:`.channel`, :mod:`.executor`); this
module only moves bytes and blocks: a channel's condition variable is its lock, readers block
on the socket with a timeout set to the caller's deadline, and connecting (handshake and probe)
runs in a short-lived background thread. The caller's thread writes a fan-out to every node
and reads the replies itself: no reader thread, no thread hand-off per reply.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import redis.exceptions as rex

from redlease.core import _sync
from redlease.core.quorum import _probe, channel
from redlease.core.quorum.executor import Blpop, Collect, QuorumExecutor, Settle, Step
from redlease.core.requests import Request
from redlease.errors import LockError


class Channel(channel.Channel):
    """A :class:`~redlease.core.quorum.channel.Channel` over a blocking redis-py connection."""

    def __init__(self, client: Any, name: str, dead_after: float) -> None:
        # the state's lock is the condition's own lock, taken directly: ``with`` on the lock is
        # C code, on the Condition a Python method (four times per node per request)
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        super().__init__(client, name, dead_after, lock)

    def wait_settled(self, deadline: float) -> None:
        """Wait until connected or failed, or until ``deadline``."""
        with self._lock:
            left = self._settle_locked(deadline)
            while left is not None:
                self._sleep_locked(left)
                left = self._settle_locked(deadline)

    def wait(self, slot: channel.Slot, deadline: float) -> None:
        """Until ``slot`` is filled or ``deadline``: read replies (reader role) or wait."""
        while True:
            with self._lock:
                conn = self._claim_locked(slot, deadline)
                while isinstance(conn, float):
                    self._sleep_locked(conn)
                    conn = self._claim_locked(slot, deadline)
            if conn is None:
                return
            try:
                self._read_until(conn, slot, deadline)
            finally:
                more = self._reader_done(slot, deadline)
            if not more:
                return

    # -- driver hooks ---------------------------------------------------------------------------

    def _spawn(self) -> None:
        threading.Thread(target=self._run, name=f"redlease-node-{self.name}", daemon=True).start()

    def _write(self, conn: Any, packed: Any) -> None:
        if getattr(conn, "_sock", True) is None:  # dropped: never reconnect silently here
            raise self._lost()
        conn.send_packed_command(packed, check_health=False)

    def _dispose(self, conn: Any) -> None:
        conn.disconnect()  # shuts the socket down: a reader blocked on it wakes up

    def _notify(self) -> None:
        self._cond.notify_all()

    def _sleep_locked(self, seconds: float) -> None:
        self._sleepers += 1
        try:
            self._cond.wait(seconds)
        finally:
            self._sleepers -= 1

    # -- I/O --------------------------------------------------------------------------------------

    def _read_until(self, conn: Any, slot: channel.Slot, deadline: float) -> None:
        """Reader role: hand replies to their slots in order until ``slot`` is filled."""
        while not slot.done:
            # past the deadline: only what is already there (CPython polls >= 1 ms)
            left = max(deadline - time.monotonic(), 1e-6)
            try:
                sock = conn._sock
                if sock is None:
                    raise self._lost()
                sock.settimeout(left)  # bounds this read, partial replies included
                value: Any = conn.read_response(disconnect_on_error=False)
            except rex.TimeoutError:
                self._check_dead(conn)
                return
            except Exception as exc:  # noqa: BLE001 - an error reply, or the connection is gone
                value = exc
            if not self._received(conn, value):
                return

    def _run(self) -> None:
        """Background connect: handshake and probe on a connection of the channel's own."""
        try:
            conn = channel.own_connection(self.client)
            try:
                conn.connect()
                conn.send_packed_command(conn.pack_commands(_probe.COMMANDS), check_health=False)
                replies = [_reply(conn) for _ in _probe.COMMANDS]
                probe = _probe.parse(replies, time.monotonic())
            except BaseException:
                conn.disconnect()
                raise
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the waiters
            self._connect_failed(exc)
            return
        self._connected(conn, probe)


def collect(pairs: Sequence[tuple[Channel, channel.Slot]], deadline: float) -> None:
    """Wait for each ``(channel, slot)`` in turn until its slot is filled or ``deadline``."""
    for ch, slot in pairs:
        ch.wait(slot, deadline)


def _reply(conn: Any) -> object:
    try:
        return conn.read_response()
    except rex.ResponseError as exc:
        return exc


class QuorumNode(QuorumExecutor, _sync.SyncNode):
    """The blocking executor of one lock on a :class:`~redlease.core.quorum.NodeSet`."""

    single = _sync.SyncNode  # the driver of one node, for the wake-up wait

    def execute(self, req: Request) -> Any:
        steps, reply = self.steps(req), None
        try:
            while True:
                reply = self._perform(steps.send(reply))
        except StopIteration as stop:  # the steps are done: ``stop.value`` is the reply
            return stop.value

    @staticmethod
    def _perform(step: Step) -> Any:
        if isinstance(step, Collect):
            collect(step.pairs, step.deadline)  # type: ignore[arg-type]
        elif isinstance(step, Settle):
            for ch in step.channels:
                ch.wait_settled(step.deadline)  # type: ignore[attr-defined]
        elif isinstance(step, Blpop):
            try:
                return step.node.execute(step.req)
            except LockError as exc:
                return exc
        else:
            time.sleep(step.seconds)
        return None
