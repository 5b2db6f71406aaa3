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
from collections.abc import Hashable, Sequence
from typing import Any

import redis.exceptions as rex

from redlease.core import _sync, redispy
from redlease.core.primitives import give_up_together
from redlease.core.quorum import _probe, channel
from redlease.core.quorum.executor import Blpop, Collect, QuorumExecutor, Settle, Step, Steps
from redlease.core.requests import Request, Wait
from redlease.core.waiting import LeaseOwner
from redlease.errors import LockError


class Channel(channel.Channel):
    """A :class:`~redlease.core.quorum.channel.Channel` over a blocking redis-py connection.

    A caller waiting for a reply parks on a lock of its own, released when its slot is filled
    (:attr:`~redlease.core.quorum.channel.Slot.then`) or when it is handed the reader role:
    one wake-up per reply, whatever the number of waiting threads. (A condition notified on
    every reply woke every waiting thread each time: with hundreds of threads, their
    wake-ups fought the reader for the GIL and the channel's lock, replies came out late,
    and a late reply counted as the node's failure.) The condition is left for the rare
    connection events (connected, failed, dropped, closed), which wake everyone.
    """

    def __init__(self, client: Any, name: str, dead_after: float) -> None:
        # the state's lock is the condition's own lock, taken directly: ``with`` on the lock is
        # C code, on the Condition a Python method (four times per node per request)
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        # callers parked until their reply, oldest first: their wake-up lock -> their slot and
        # when it is late (its deadline and patience: see ``late_at``)
        self._parked: dict[Any, tuple[channel.Slot, float, float]] = {}
        super().__init__(client, name, dead_after, lock)

    def wait_settled(self, deadline: float) -> None:
        """Wait until connected or failed, or until ``deadline``."""
        with self._lock:
            left = self._settle_locked(deadline)
            while left is not None:
                self._sleep_locked(left)
                left = self._settle_locked(deadline)

    def wait(self, slot: channel.Slot, deadline: float, patience: float = 0.0) -> None:
        """Until ``slot`` is filled or it is late (``deadline``, ``patience``: see
        :meth:`~redlease.core.quorum.channel.Channel.late_at`): read replies (reader role) or
        wait."""
        if slot.done:  # another caller read it already: the channel's lock is not needed
            return
        while True:
            with self._lock:
                conn = self._claim_locked(slot, deadline, patience)
                if conn is None:
                    if not self._reading and self._inflight:
                        self._hand_over()  # a wake-up for the reader role must not be lost
                    return
                if isinstance(conn, float):
                    wake = self._park_locked(slot, deadline, patience)
            if isinstance(conn, float):
                wake.acquire(True, conn)
                if slot.done:  # its reply woke it (and unparked it): no need for the lock
                    return
                with self._lock:
                    self._parked.pop(wake, None)
                    slot.then = None
                continue
            try:
                self._read_until(conn, slot, deadline, patience)
            finally:
                more = self._reader_done(slot, deadline, patience)
            if not more:
                return

    def _park_locked(self, slot: channel.Slot, deadline: float, patience: float) -> Any:
        """A lock for this caller to wait on, released when ``slot`` is filled, the reader
        role is handed to this caller, the node is found silent past the caller's lateness or
        the connection changes."""
        wake = threading.Lock()
        wake.acquire()
        self._parked[wake] = (slot, deadline, patience)
        slot.then = lambda: self._unpark(wake)
        return wake

    def _unpark(self, wake: Any) -> None:
        if self._parked.pop(wake, None) is not None:
            wake.release()

    # -- driver hooks ---------------------------------------------------------------------------

    def _spawn(self) -> None:
        threading.Thread(target=self._run, name=f"redlease-node-{self.name}", daemon=True).start()

    def _write(self, conn: Any, packed: Any) -> None:
        if getattr(conn, redispy.SOCK, True) is None:  # dropped: never reconnect silently here
            raise self._lost()
        conn.send_packed_command(packed, check_health=False)

    def _dispose(self, conn: Any) -> None:
        conn.disconnect()  # shuts the socket down: a reader blocked on it wakes up

    def _notify(self) -> None:
        self._cond.notify_all()
        for wake in list(self._parked):
            self._unpark(wake)

    def _silent(self, until: float) -> None:
        for wake, (_, deadline, patience) in list(self._parked.items()):
            if patience > 0 and self.late_at(deadline, patience) <= until:
                self._unpark(wake)

    def _hand_over(self) -> None:
        # the caller parked last: its request is (about) the newest, so it reads every reply
        # before its own and hands each to its caller, instead of one hand-over per reply
        if self._parked:
            self._unpark(next(reversed(self._parked)))

    def _sleep_locked(self, seconds: float) -> None:
        self._sleepers += 1
        try:
            self._cond.wait(seconds)
        finally:
            self._sleepers -= 1

    # -- I/O --------------------------------------------------------------------------------------

    def _read_until(self, conn: Any, slot: channel.Slot, deadline: float, patience: float) -> None:
        """Reader role: hand replies to their slots in order until ``slot`` is filled, or until
        a read finds the node silent past the slot's lateness. A read waits at most
        :data:`~redlease.core.quorum.channel.LATE_GRACE`, so that callers waiting past theirs
        learn how long the node has been silent (``_check_dead``)."""
        while not slot.done:
            start = time.monotonic()
            late = self.late_at(deadline, patience)
            # past the lateness: only what is already there (CPython polls >= 1 ms)
            left = max(min(late - start, channel.LATE_GRACE), 1e-6)
            try:
                sock = getattr(conn, redispy.SOCK)
                if sock is None:
                    raise self._lost()
                sock.settimeout(left)  # bounds this read, partial replies included
                value: Any = conn.read_response(disconnect_on_error=False)
            except rex.TimeoutError:
                # the read waited at least ``left`` from ``start`` and nothing came
                quiet = start + left
                self._check_dead(conn, quiet)
                if quiet >= late:
                    return
                continue
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


def collect(
    pairs: Sequence[tuple[Channel, channel.Slot]],
    deadline: float,
    patience: float = 0.0,
    needed: int = 0,
) -> None:
    """Wait for each ``(channel, slot)`` in turn until its slot is filled or ``deadline``;
    then, while fewer than ``needed`` are filled, for those whose node keeps answering
    (:class:`~redlease.core.quorum.executor.Collect`)."""
    for ch, slot in pairs:
        ch.wait(slot, deadline)
    for ch, slot in pairs:
        if sum(s.done for _, s in pairs) >= needed:
            return
        ch.wait(slot, deadline, patience)


def _reply(conn: Any) -> object:
    try:
        return conn.read_response()
    except rex.ResponseError as exc:
        return exc


class WaitNode(_sync.SyncNode):
    """One node of a set as the blocking driver of a quorum lock's wake-up wait (its BLPOP).
    The listener it starts gives up for the lock's waiters through ``quorum`` (the lock's
    executor): one fan-out of their GIVE_UP, judged by quorum. Its waiters
    listen apart from any other node set's on the same client: a quorum read is good only for
    the nodes it read."""

    def __init__(self, client: Any, quorum: QuorumNode) -> None:
        super().__init__(client, quorum.lock)
        self.quorum = quorum

    def listen_key(self, req: Wait) -> Hashable:
        return (req.keys, self.quorum.nodeset)

    def give_up(self, waits: list[Wait]) -> LeaseOwner | None:
        return self.quorum.give_up(waits)


class QuorumNode(QuorumExecutor, _sync.SyncNode):
    """The blocking executor of one lock on a :class:`~redlease.core.quorum.NodeSet`."""

    wait_node = WaitNode

    def execute(self, req: Request) -> Any:
        return self._run(self.steps(req))

    def give_up(self, waits: list[Wait]) -> LeaseOwner | None:
        """Who holds the lease of ``waits`` (waiters due together) by a quorum of the nodes (one
        fan-out of their one GIVE_UP, which takes them off each node's queue where another
        owner holds the lease)."""
        return self._run(self.owner_steps(give_up_together(waits)))  # type: ignore[no-any-return]

    def _run(self, steps: Steps) -> Any:
        reply = None
        try:
            while True:
                reply = self._perform(steps.send(reply))
        except StopIteration as stop:  # the steps are done: ``stop.value`` is the reply
            return stop.value

    @staticmethod
    def _perform(step: Step) -> Any:
        if isinstance(step, Collect):
            pairs: Any = step.pairs  # this driver's channels
            collect(pairs, step.deadline, step.patience, step.needed)
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
