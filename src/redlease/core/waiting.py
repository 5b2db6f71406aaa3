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

Waiters whose deadlines pass together give up together: one GIVE_UP script reads the lease's
owner, at or after all their deadlines (sent by the asyncio listener, or by the first thread
due), and takes those it gives up for off the queue in the same step. A waiter whose lease
another owner held then is told so (:class:`~redlease.core.requests.GaveUp`, what its own last
attempt would have been told at that instant) and is already gone from the queue and the direct
hand-off when its LockTimeout is raised: nothing is left for its process to send afterwards (it
may close its client or exit at once), so no release hands a lease to a waiter that left. A
free lease, or one granted to the waiter itself, sends it to its own last attempt.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import Any

from redlease.core.primitives import give_up_together
from redlease.core.replies import as_str
from redlease.core.requests import Call, GaveUp, Wait

LISTEN_STEP = 5.0  # longest single BLPOP of a listener (seconds): a bounded fallback
LISTEN_SLACK = 0.25  # a listener's BLPOP outlasts the latest waiter's deadline by this much
LINGER = 1.0  # an idle listener thread waits this long for the next waiter before it ends
TOGETHER = 2  # the fewest waiters due at once that their listener gives up for together
_ATTR = "_redlease_waiting"


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
        """The waiters the listener gives up for (their wait carries a ``give_up``) whose
        deadline has passed at ``now``."""
        return [w for w in self._waiters if w.wait.give_up is not None and w.deadline <= now]

    @staticmethod
    def together(batch: list[Waiter]) -> bool:
        """Whether ``batch`` is given up for together; a lone waiter makes its own last
        attempt, which leaves the queue before its timeout is raised."""
        return len(batch) >= TOGETHER

    @staticmethod
    def giving_up(batch: list[Waiter]) -> Call:
        """The one GIVE_UP for ``batch`` (waiters due together): it reads the lease and takes
        those it gives up for off the queue (see :meth:`settle`)."""
        return give_up_together([w.wait.give_up for w in batch if w.wait.give_up is not None])

    def next_due(self) -> float | None:
        """The earliest deadline of a waiter the listener gives up for, None if none."""
        return min((w.deadline for w in self._waiters if w.wait.give_up is not None), default=None)

    def settle(self, batch: list[Waiter], lease: Any) -> list[Waiter]:
        """Take ``batch``'s waiters (given up, not served meanwhile) off the list after the
        lease's ``[owner, holder]`` was read at or after all their deadlines (None: not read).
        Each is told :class:`GaveUp` when another owner held it (the GIVE_UP that read it took
        the waiter off the queue), else ``False`` (its own last attempt follows). Returns the
        waiters taken off, to be woken."""
        owner = as_str(lease[0]) if lease and lease[0] is not None else ""
        holder = as_str(lease[1]) if lease and len(lease) > 1 and lease[1] is not None else ""
        settled = [w for w in batch if self.leave(w)]
        for waiter in settled:
            gave_up = bool(owner) and owner != waiter.wait.owner
            waiter.reply = GaveUp(holder or None) if gave_up else False
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
