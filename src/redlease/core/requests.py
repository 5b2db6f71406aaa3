"""The I/O requests that the sans-I/O lock flows yield, and how a driver advances a flow.

A flow (:mod:`redlease.core.flows`, :mod:`redlease.core.multi`) is a generator that yields
:class:`Call`, :class:`Wait` or :class:`Replicate` and receives each one's reply; the drivers
(:mod:`redlease.core._sync`, :mod:`redlease.core._async`, the quorum executor) perform the
requests and feed the replies back with :func:`resume`. Nothing here touches a socket.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from redlease.core import scripts
from redlease.core.intents import Intent
from redlease.core.replies import as_str
from redlease.core.timing import Budget


# not frozen: one is made for every request, and a frozen dataclass's __init__ costs 4x
@dataclass(slots=True)
class Call:
    """Run ``script`` with ``keys`` and ``args``; the reply is the script's raw result.

    ``owner``: the owner token the request acts for. A driver writes a request of an owner behind
    that owner's earlier requests to the same node that are still unanswered (same connection),
    so an undo can never overtake the request it undoes. ``timeout``: the longest to wait for
    the reply (``None``: the client's socket timeout). ``intent``: what the call means, for a
    layer that runs it on several nodes (:mod:`redlease.core.intents`). ``deadline``: the
    monotonic time its operation ends (None: none), for a layer that makes several round trips
    of one request (a quorum's flow: :mod:`redlease.core.quorum.executor`).
    """

    script: scripts.Script
    keys: Sequence[str]
    args: Sequence[str | int]
    owner: str = ""
    timeout: float | None = None
    intent: Intent | None = None
    deadline: float | None = None

    def evalsha(self) -> tuple[str | int, ...]:
        """The Redis command that runs the script by its SHA1 (the usual case)."""
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def eval(self) -> tuple[str | int, ...]:
        """The Redis command that runs the script from source (after a NOSCRIPT reply)."""
        return ("EVAL", self.script.lua, len(self.keys), *self.keys, *self.args)

    def fcall(self) -> tuple[str | int, ...]:
        """The Redis command that runs the script as a function of the redlease library."""
        return ("FCALL", self.script.function, len(self.keys), *self.keys, *self.args)

    def command(self, functions: bool) -> tuple[str | int, ...]:
        """FCALL where the server has the redlease library loaded (``functions``), else
        EVALSHA: the one rule for which of the two to send."""
        return self.fcall() if functions else self.evalsha()


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until a wake token arrives on one of ``keys`` (wake lists on one node) or
    ``timeout`` seconds pass (BLPOP). The reply is ``True`` if a token was popped, else ``False``;
    a lease handed over directly (popped from ``grants``, one of ``keys``) is the reply itself.

    The waiters of one lock in one process share one listener (:mod:`redlease.core.waiting`):
    ``grants`` is then their process's mailbox, where each grant names its ``owner``.
    """

    keys: tuple[str, ...]
    timeout: float
    grants: str = ""
    owner: str = ""
    # The wait that ends at the waiter's deadline (one lock on one node, cluster slot or
    # RedLock set; ``lease`` is then its lease key): the listener may give up for it, replying
    # :class:`GaveUp` when ``lease`` has another owner (on a RedLock set: by a quorum) at or
    # after the deadline (what a last attempt would have been told). ``give_up`` (GIVE_UP, run
    # once for all waiters due at once; on a RedLock set on every node) reads the lease and
    # takes those given up for off the queue in the same step.
    lease: str = ""
    give_up: Call | None = None

    def reply(self, popped: Any) -> Any:
        """The reply for a BLPOP that returned ``popped`` ([key, value], or None: timed out)."""
        if not popped:
            return False
        if self.grants and as_str(popped[0]) == self.grants:
            return popped[1]
        return True


@dataclass(frozen=True, slots=True)
class Replicate:
    """``WAIT replicas timeout_ms`` on the node of ``key``; the reply is the replica count.
    ``timeout``: the longest to wait for the reply (None: the client's socket timeout);
    ``deadline``: as a :class:`Call`'s."""

    key: str
    replicas: int
    timeout_ms: int
    timeout: float | None = None
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class GaveUp:
    """A :class:`Wait`'s reply when its listener gave up for the waiter: at or after the
    waiter's deadline the lease had another owner (held by ``holder``), and the same script
    took the waiter off the queue (no release can hand it the lease any more)."""

    holder: str | None = None


Request = Call | Wait | Replicate


def bounded(
    req: Request, budget: Budget | None, now: float, socket_timeout: float | None = None
) -> Request:
    """``req`` with its wait for a reply bounded by ``budget`` (see
    :class:`~redlease.core.timing.Budget`; a shorter ``socket_timeout`` of the client still
    counts) and its operation's deadline noted; a :class:`Wait` keeps its own (its flow's
    pacing ends it at the deadline). The one place the drivers take a request's limit from."""
    if budget is None:
        return req
    if isinstance(req, Call):
        req.timeout = budget.bound(req.timeout, now, socket_timeout)
        req.deadline = budget.deadline
        return req
    if isinstance(req, Replicate):
        timeout = budget.bound(req.timeout, now, socket_timeout)
        return replace(req, timeout=timeout, deadline=budget.deadline)
    return req


Flow = Generator[Request, Any, Any]


def resume(
    flow: Flow, reply: Any = None, error: BaseException | None = None
) -> tuple[Request | None, Any]:
    """Advance ``flow`` with the reply to its last request, or throw that request's ``error``
    into it. Returns ``(next request, None)``, or ``(None, result)`` once the flow is done.
    Every driver runs flows with this, so they all treat replies and errors alike."""
    try:
        return (flow.send(reply) if error is None else flow.throw(error)), None
    except StopIteration as stop:
        return None, stop.value
