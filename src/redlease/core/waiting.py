"""The waiters of one lock in one process share one wake-up path (pure bookkeeping, no I/O).

A blocked acquirer does not hold a connection of its own: it joins the :class:`WaitList` of
its client and wait keys, and one listener per list (a task in ``core._async``, a thread in
``core._sync``) BLPOPs the lock's wake list and the process's mailbox for that lock and hands
what it pops to the waiters here: a lease granted directly (``pass_on`` in
:mod:`redlease.core.scripts` pushes ``'fence now_ms transitions token'``) to the waiter of
that owner token, a wake token to the waiter that joined first. So connections per process grow
with locks, not waiters. Each waiter keeps its own deadline (its timeout is local and exact);
the listener only has to keep one BLPOP in flight while anyone waits.

A grant whose waiter has gone (it timed out meanwhile) is dropped here: Redis still names that
owner, and its next attempt takes the lease or its LEAVE passes it on (see the scripts).

Waiters whose deadlines pass together give up together: the lease's owner is read once, at or
after all their deadlines (by the asyncio listener, or by the first thread due). On one node or
cluster slot one GIVE_UP script reads it and takes those it gives up for off the queue in the
same step, so a waiter told LockTimeout is already gone from the queue and the direct hand-off:
nothing is left for its process to send (it may close its client or exit at once), and no
release hands a lease to a waiter that left. On a RedLock set one fan-out of ``HMGET`` reads it
on every node, the lock view's quorum rule (:func:`redlease.core.view.key_view`) turns the
replies into one :class:`LeaseOwner`, and the LEAVEs of those given up for run back to back
afterwards (one write per node; a set has no direct hand-off to strand). A waiter whose lease
another owner held is told so (:class:`~redlease.core.requests.GaveUp`, what its own last
attempt would have been told at that instant); a free lease, one granted to the waiter itself
(on any node of a set), or a holder no quorum agrees on sends it to its own last attempt.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import Any

from redlease.core.replies import as_str
from redlease.core.requests import GaveUp, Wait
from redlease.core.state import LockState
from redlease.core.view import key_view

LISTEN_STEP = 5.0  # longest single BLPOP of a listener (seconds): a bounded fallback
LISTEN_SLACK = 0.25  # a listener's BLPOP outlasts the latest waiter's deadline by this much
LINGER = 1.0  # an idle listener thread waits this long for the next waiter before it ends
TOGETHER = 2  # the fewest waiters due at once that their listener gives up for together
# a waiter due alone is given up for with those due within this long after it (seconds): the
# read they share, sent now, costs it no more than its own last attempt would
TOGETHER_WITHIN = 0.005
_ATTR = "_redlease_waiting"


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """A lease read at or after the deadlines of the waiters given up for: held by ``holder``
    (its identity), on one node or by a quorum of a RedLock set. ``owners``: every owner token a
    node named; a waiter among them may hold the lease (somewhere) and is not given up for."""

    owners: frozenset[str]
    holder: str | None = None


def owner_of(reply: Any) -> LeaseOwner | None:
    """What one node's ``HMGET lease owner holder`` says (None: free, or not read)."""
    owner = as_str(reply[0]) if reply and reply[0] is not None else ""
    if not owner:
        return None
    holder = as_str(reply[1]) if len(reply) > 1 and reply[1] is not None else ""
    return LeaseOwner(frozenset((owner,)), holder or None)


def quorum_owner(key: str, replies: list[Any], quorum: int, unanswered: int) -> LeaseOwner | None:
    """What the ``HMGET lease owner holder fence`` replies of a RedLock set's nodes that answered
    say, by the lock view's quorum rule (:func:`~redlease.core.view.key_view`): the holder a
    quorum of them agrees on (same identity and fencing token), None when no lease is on a
    quorum (free, split, too few answers). Held by others on a quorum, a lease leaves too few
    nodes for any other owner's attempt to be granted."""
    states, owners = [], set()
    for reply in replies:
        owner = as_str(reply[0]) if reply and reply[0] is not None else ""
        if not owner:
            states.append(LockState(key, 0))
            continue
        owners.add(owner)
        holder = as_str(reply[1]) if len(reply) > 1 and reply[1] is not None else ""
        fence = as_str(reply[2]) if len(reply) > 2 and reply[2] is not None else ""
        token = int(fence) if fence.isdigit() else None
        states.append(LockState(key, 0, holder=holder or owner, fencing_token=token))
    view = key_view(key, states, quorum, unanswered)
    if view.holder is None:
        return None
    return LeaseOwner(frozenset(owners), view.holder)


@dataclass(slots=True, eq=False)
class Waiter:
    """One blocked acquirer: its request, its deadline (the list's clock), what it got.

    ``signal``: the driver's way to wake it (a future, an event)."""

    wait: Wait
    deadline: float
    signal: Any = None
    reply: Any = None
    error: BaseException | None = None
    done: bool = False


@dataclass(slots=True, eq=False)
class WaitList:
    """The waiters on one set of wake ``keys`` of one client, in the order they joined."""

    keys: tuple[str, ...]
    grants: str = ""  # the mailbox among ``keys`` (grants name their owner), '' for none
    _waiters: dict[Waiter, None] = field(default_factory=dict)
    _owners: dict[str, Waiter] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._waiters)

    def join(self, wait: Wait, now: float, signal: Any = None) -> Waiter:
        waiter = Waiter(wait, now + wait.timeout, signal)
        self._waiters[waiter] = None
        if wait.owner:
            self._owners[wait.owner] = waiter
        return waiter

    def leave(self, waiter: Waiter) -> bool:
        """Take ``waiter`` off the list; False if it was served (or failed) already."""
        if waiter not in self._waiters:
            return False
        del self._waiters[waiter]
        if self._owners.get(waiter.wait.owner) is waiter:
            del self._owners[waiter.wait.owner]
        return True

    def listen_timeout(self, now: float) -> float:
        """How long the listener's next BLPOP may block: until the latest deadline, bounded."""
        latest = max((w.deadline for w in self._waiters), default=now)
        return min(LISTEN_STEP, max(latest - now, 0.0) + LISTEN_SLACK)

    def route(self, popped: Any) -> Waiter | None:
        """The waiter served by ``popped`` (BLPOP's ``[key, value]``), its reply set and taken
        off the list; None when nobody here wanted it."""
        key = as_str(popped[0])
        if self.grants and key == self.grants:
            grant, _, owner = as_str(popped[1]).rpartition(" ")
            waiter = self._owners.get(owner)
            if waiter is None:
                return None  # it gave up meanwhile: Redis passes the lease on (see above)
            reply = waiter.wait.reply([key, grant])
        else:
            waiter = next(iter(self._waiters), None)
            if waiter is None:
                return None
            reply = True
        self.leave(waiter)
        waiter.reply, waiter.done = reply, True
        return waiter

    def due(self, now: float) -> list[Waiter]:
        """The waiters the listener gives up for (their wait names its ``lease``) whose
        deadline has passed at ``now``."""
        return [w for w in self._waiters if w.wait.lease and w.deadline <= now]

    def together(self, batch: list[Waiter], now: float) -> bool:
        """Whether ``batch`` (due at ``now``) is given up for together: two or more, or one with
        another waiter due within :data:`TOGETHER_WITHIN` (it goes with the next read, sent
        after its deadline). A lone waiter makes its own last attempt, which leaves the queue
        before its timeout is raised. (Without the look ahead, a listener that gives up as
        deadlines pass one by one, a fraction of a millisecond apart, sees each alone.)"""
        if len(batch) >= TOGETHER:
            return True
        soon = now + TOGETHER_WITHIN
        return any(w.wait.lease and now < w.deadline <= soon for w in self._waiters)

    def next_due(self) -> float | None:
        """The earliest deadline of a waiter the listener gives up for, None if none."""
        return min((w.deadline for w in self._waiters if w.wait.lease), default=None)

    def settle(self, batch: list[Waiter], lease: LeaseOwner | None) -> list[Waiter]:
        """Take ``batch``'s waiters (given up, not served meanwhile) off the list after the
        lease was read at or after all their deadlines (None: free, or not read). Each is told
        :class:`GaveUp` when another owner held it (on one node the GIVE_UP that read it took
        the waiter off the queue; a RedLock set's waiter needs its ``leave``), else ``False``
        (its own last attempt follows). Returns the waiters taken off, to be woken."""
        settled = [w for w in batch if self.leave(w)]
        for waiter in settled:
            if lease is not None and waiter.wait.owner not in lease.owners:
                waiter.reply = GaveUp(lease.holder)
            else:
                waiter.reply = False
            waiter.done = True
        return settled

    def fail(self, error: BaseException) -> list[Waiter]:
        """Every waiter, each given ``error`` (the listener failed), the list emptied."""
        served = list(self._waiters)
        for waiter in served:
            waiter.error, waiter.done = error, True
        self._waiters.clear()
        self._owners.clear()
        return served


def mailbox(client: Any) -> str:
    """The id of ``client``'s mailbox in this process (forked children get their own): the lists
    ``<wake list>:<id>`` where its listeners receive the leases handed over to its waiters."""
    state = registry(client)
    return state[1]


def registry(client: Any) -> tuple[int, str, dict[Any, Any]]:
    """``(pid, mailbox id, listeners by wait keys)`` of ``client`` in this process."""
    pid = os.getpid()
    state: tuple[int, str, dict[Any, Any]] | None = client.__dict__.get(_ATTR)
    if state is None:  # two threads at once: one mailbox wins
        state = client.__dict__.setdefault(_ATTR, (pid, "@" + secrets.token_hex(6), {}))
    if state[0] != pid:  # a forked child: its own mailbox and listeners
        state = client.__dict__[_ATTR] = (pid, "@" + secrets.token_hex(6), {})
    return state
