"""Run quorum flows over the node set's channels: the logic both drivers share.

:class:`QuorumExecutor` turns one :mod:`redlease.core.requests` request into the quorum flow of
:mod:`~redlease.core.quorum.flows` and carries it out: connect and probe every node
(:class:`~redlease.core.quorum.protocol.Ready`), write a fan-out to every node's
:class:`~redlease.core.quorum.channel.Channel` from the caller (no reader threads or tasks),
collect the replies under one deadline, and wait for wake-ups on one reachable node. Where it
must block it yields an :data:`Step` (:class:`Settle`, :class:`Collect`, :class:`Blpop`,
:class:`Sleep`); the blocking and asyncio drivers (:mod:`._sync`, :mod:`._async`) perform it
and send back the result.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from redlease.core import client as _redis
from redlease.core.quorum.channel import FIRST_CONTACT, Channel, Corked, Memo, Slot, flush
from redlease.core.quorum.flows import read_owner, run
from redlease.core.quorum.protocol import Batch, Command, FanOut, QFlow, QRequest, Ready, Settings
from redlease.core.requests import Call, GaveUp, Request, Wait
from redlease.core.restart import Probe
from redlease.core.rules import LATE, Down, Reply, Result
from redlease.core.timing import MIN_WAIT
from redlease.errors import LockError, LockUnavailable


@dataclass(slots=True)
class Settle:
    """Wait until every channel is connected or failed, or until ``deadline``."""

    channels: Sequence[Channel]
    deadline: float


@dataclass(slots=True)
class Collect:
    """Wait for each ``(channel, slot)`` until its slot is filled or it is late: at
    ``deadline``; past it, while fewer than ``needed`` slots are filled, a node that keeps
    answering the requests this client wrote before (its own queue, not the node's delay) is
    waited for until it has been silent for ``patience`` (:meth:`Channel.late_at`). So a
    client-side queue never makes a quorum look unreachable, and one slow node does not hold
    up a fan-out a quorum answered."""

    pairs: Sequence[tuple[Channel, Slot]]
    deadline: float
    patience: float
    needed: int


@dataclass(slots=True)
class Blpop:
    """Run the :class:`~redlease.core.requests.Wait` ``req`` on the single-node driver
    ``node``; the reply is its result or the :class:`LockError` it raised."""

    node: Any
    req: Wait


@dataclass(slots=True)
class Sleep:
    seconds: float


Step = Settle | Collect | Blpop | Sleep

AVOID_FAILED = 1.0  # seconds a node whose wake-up wait failed is passed over
Steps = Generator[Step, Any, Any]


class QuorumExecutor:
    """The executor of one lock on a :class:`~redlease.core.quorum.NodeSet` (shared part).

    It stands where a single-node driver stands in a lock handle (the drivers also derive from
    :class:`redlease.core._sync.SyncNode` / :class:`redlease.core._async.AsyncNode`), so every
    primitive runs unchanged: each request becomes a quorum flow.
    """

    # the driver class of one node for the wake-up wait, made with (client, this executor): its
    # listener gives up for the lock's waiters through this executor; set by each driver
    wait_node: Any
    # a fan-out prepares every node's request, then writes them one after the other (see
    # Channel.submit): only where nothing can submit in between (one event loop)
    cork = False

    def __init__(self, nodeset: Any, settings: Settings) -> None:
        self.client = nodeset
        self.lock = settings.prim.name
        self.name = nodeset.description
        self.cluster = False
        self.socket_timeout = nodeset.socket_timeout
        self.nodeset = nodeset
        self.settings = settings
        self._waiters = [self.wait_node(c, self) for c in nodeset.clients]
        # every client of the set waits on the same node first (the same order by name), so a
        # release's wake token there wakes the longest-waiting waiter, and only that one
        self._wait_order = sorted(range(len(self._waiters)), key=lambda i: settings.names[i])
        self._avoid: dict[int, float] = {}  # node -> until when to wait elsewhere (it failed)

    def steps(self, req: Request) -> Steps:
        """Carry out ``req``; yields what the driver must wait for; returns the reply. No wait
        of its flow (each bounded by the node timeout, the first contact's by
        :data:`FIRST_CONTACT`) goes past its operation's deadline (``req.deadline``:
        :func:`~redlease.core.requests.bounded`)."""
        if isinstance(req, Wait):
            return (yield from self._wait(req))
        return (yield from self._steps(run(self.settings, req), req.deadline))

    def owner_steps(self, give_up: Call) -> Steps:
        """Who holds the lease by a quorum (:func:`~.flows.read_owner`): read once, by the
        ``give_up`` of the lock's waiters given up for together (:mod:`redlease.core.waiting`)."""
        return self._steps(read_owner(self.settings, give_up), give_up.deadline)

    def _steps(self, flow: QFlow, end: float | None) -> Steps:
        """Carry out the quorum ``flow``, no wait of it past ``end`` (None: each its own);
        return its result."""
        pins: list[int] = []  # per node: the connection this flow's decisions are for
        try:
            step = next(flow)
            while True:
                step = flow.send((yield from self._serve(step, pins, end)))
        except StopIteration as stop:  # the flow is done: ``stop.value`` is the reply
            return stop.value

    def _serve(self, step: QRequest, pins: list[int], end: float | None) -> Steps:
        """Carry out one request of a quorum flow; return its reply."""
        if isinstance(step, FanOut):
            return (yield from self._fan_out(step, pins if step.pinned else None, end))
        if isinstance(step, Ready):
            return (yield from self._ready(step.timeout, pins, end))
        self.nodeset.channels()[step.index].remark(pins[step.index], step.probe)
        return None

    def _ready(
        self, timeout: float, pins: list[int], end: float | None
    ) -> Generator[Step, Any, list[Probe | Down | None]]:
        """Every node's probe (or why it has none); ``pins`` gets the connections probed."""
        channels: list[Channel] = self.nodeset.channels()
        views = [ch.view for ch in channels]
        probes: list[Probe | Down | None] = [p for p, _ in views]
        if None in probes:
            first_use = all(p is None for p in probes)
            for ch in channels:
                ch.start()
            # the first contact needs a handshake and a probe: give it more than one round trip
            wait = _within(max(timeout, FIRST_CONTACT) if first_use else timeout, end)
            yield Settle(channels, time.monotonic() + wait)
            views = [ch.view for ch in channels]
            probes = [
                p or failed(self.lock, ch) for (p, _), ch in zip(views, channels, strict=True)
            ]
        pins[:] = [epoch for _, epoch in views]  # without a probe: no connection to rely on
        return probes

    def _fan_out(
        self, step: FanOut, pins: list[int] | None, end: float | None
    ) -> Generator[Step, Any, dict[int, Result]]:
        """Write to every node first, then collect the replies up to one shared deadline (the
        step's timeout, not past ``end``)."""
        channels: list[Channel] = self.nodeset.channels()
        memo: Memo = {}
        slots = {}
        corked: list[Corked] | None = [] if self.cork else None
        for i, req in step.calls.items():
            reqs = req if isinstance(req, tuple) else (req,)
            slots[i] = submit_all(channels[i], reqs, memo, pins[i] if pins else None, corked)
        if corked:
            flush(corked)
        if step.timeout > 0:
            order = sorted(slots, key=lambda i: channels[i].queued)  # slow nodes last
            pairs = [(channels[i], slots[i][-1]) for i in order]
            needed = min(self.settings.quorum, len(pairs))
            wait = _within(step.timeout, end)
            yield Collect(pairs, time.monotonic() + wait, wait, needed)
        return {
            i: to_result(self.lock, channels[i].name, ss, isinstance(step.calls[i], tuple))
            for i, ss in slots.items()
        }

    def _wait(self, req: Wait) -> Steps:
        """BLPOP the wake list on one reachable node (the next one on failure); bounded fallback.

        Each release pushes one wake token on every node where it held the lease and waiters
        are registered. The node is the first in name order among those the last attempt named
        (:func:`~redlease.core.quorum.flows.wait_nodes`: where the holder's lease is): so all
        the waiters of a lock listen on one node, and a release wakes one of them, the one that
        waited longest (BLPOP serves first come, first served), instead of one per node racing
        each other for the lock. A node whose wait failed is passed over for a while. The wait
        that ends at the deadline may come back :class:`GaveUp`: the listener gave up for the
        waiter (through this executor: :meth:`owner_steps`).
        """
        channels = self.nodeset.channels()
        now = time.monotonic()
        best, outside = self.settings.wait_on, self.settings.outside
        order = sorted(
            self._wait_order,
            key=lambda i: (i not in best, i in outside, self._avoid.get(i, 0) > now),
        )
        for i in order:
            if channels[i].probe is None:
                continue
            woke = yield Blpop(self._waiters[i], req)
            if type(woke) is GaveUp:  # its listener gave up for it (and runs its LEAVE)
                return woke
            if not isinstance(woke, LockError):
                return bool(woke)
            self._avoid[i] = time.monotonic() + AVOID_FAILED
        yield Sleep(min(req.timeout, 0.05))
        return False


def _within(wait: float, end: float | None) -> float:
    """``wait`` seconds, or fewer where ``end`` comes sooner (still :data:`MIN_WAIT`: a reply
    already on its way is read)."""
    return wait if end is None else max(MIN_WAIT, min(wait, end - time.monotonic()))


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


def failed(lock: str, channel: Channel) -> Down | None:
    """Why a channel has no probe (None: still connecting)."""
    error = channel.last_error
    return Down(node_error(error, lock, channel.name)) if error is not None else None


def node_error(exc: BaseException, lock: str, node: str) -> LockError:
    mapped = _redis.translate(exc, lock, node)
    return mapped if mapped is not None else LockUnavailable(lock, str(exc), nodes=[node])


def call_args(req: Any, functions: bool) -> tuple[Any, ...]:
    """The Redis command for a :class:`Call` (FCALL or EVALSHA: the channel's probe loaded the
    library and the scripts, see :mod:`._probe`) or a Command."""
    if isinstance(req, Command):
        return req.args
    return tuple(req.command(functions))


def submit_all(
    channel: Channel,
    reqs: Batch,
    memo: Memo,
    epoch: int | None,
    corked: list[Corked] | None = None,
) -> list[Slot]:
    """Write a node's requests in order (on connection ``epoch`` if given): several in one
    write when connected (:meth:`Channel.submit_many`), else one by one, and after a lost one
    the rest are not sent. ``corked``: see :meth:`Channel.submit`."""
    probe = channel.probe
    functions = probe is not None and probe.functions
    commands = []
    for r in reqs:
        key = (id(r), functions)
        args = memo.get(key)
        if args is None:
            args = memo[key] = call_args(r, functions)
        commands.append(args)
    if len(commands) > 1:
        batch = channel.submit_many(commands, memo, epoch, corked)
        if batch is not None:
            return batch
    slots: list[Slot] = []
    for args in commands:
        slots.append(channel.submit(args, slots[-1] if slots else None, memo, epoch, corked))
    return slots
