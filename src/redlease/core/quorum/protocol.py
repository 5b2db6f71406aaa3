"""What a quorum flow yields and is told (sans-I/O; :mod:`redlease.core.quorum.flows`): the
requests to the executor (:class:`Ready`, :class:`FanOut`, :class:`Marked`), the plain commands
and batches a fan-out sends, and the :class:`Settings` of one lock on a node set."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease.core.primitives import Primitive
from redlease.core.quorum import _probe
from redlease.core.requests import Call
from redlease.core.restart import Probe


@dataclass(frozen=True, slots=True)
class Command:
    """A plain Redis command (probes, re-seeding, ``WAIT``)."""

    args: tuple[str | int, ...]


NODE_READ = tuple(Command(c) for c in _probe.NODE)  # what a node says now (see _probe.node)


Single = Call | Command
Batch = tuple[Single, ...]  # pipelined on one node; the reply is the list of replies


# not frozen: one is made for every request, and a frozen dataclass's __init__ costs 4x
@dataclass(slots=True)
class FanOut:
    """Send ``calls[i]`` to node ``i`` in parallel; wait up to ``timeout`` for the replies.

    The reply is ``{i: Result}``; ``timeout=0`` only sends (ordered behind earlier requests to
    the same node, which is what makes an undo safe while an acquire is still in flight).
    ``pinned``: a node whose probe this flow used gets the request only on that same
    connection (the decisions hold for the server process probed, not for one that took its
    place); unpinned requests (releases) may also go down a new connection.
    """

    calls: Mapping[int, Single | Batch]
    timeout: float
    pinned: bool = True


@dataclass(frozen=True, slots=True)
class Ready:
    """Connect every node (if needed) and wait up to ``timeout`` for its probe.

    The reply lists a :class:`~redlease.core.restart.Probe` per node, or :class:`Down` (why it
    cannot be reached), or ``None`` (still connecting).
    """

    timeout: float


@dataclass(frozen=True, slots=True)
class Marked:
    """Node ``index`` now says ``probe`` (its marker changed): remember it for its connection."""

    index: int
    probe: Probe


QRequest = FanOut | Ready | Marked
QFlow = Generator[QRequest, Any, Any]
ProbesFlow = Generator[QRequest, Any, list[Probe | None]]


@dataclass
class Settings:
    """What the flows need to know about a node set and one lock on it."""

    names: Sequence[str]
    quorum: int
    node_timeout: float
    restart_delay: float
    prim: Primitive
    fresh: Callable[[str], bool] = lambda token: True  # token holds nothing yet
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    reseed_state: dict[str, float] = field(default_factory=dict)
    outside: dict[int, str] = field(default_factory=dict)  # non-members and why
    # where to wait for a wake-up after the last refused acquire (see :func:`wait_nodes`); a
    # hint shared by the handle's owners
    wait_on: tuple[int, ...] = ()
    rule: str = ""  # why ``quorum`` is above the node set's (a semaphore: rules.semaphore_rule)
    set_quorum: int = 0  # the node set's own quorum (0: ``quorum``), for membership and re-seeding
    # the opt-in strict restart mode: a fresh node rejoins only when ``N - q + 1`` intact nodes
    # can re-seed it (else an operator's hand); by default the server clock's seed stands in
    strict_restart: bool = False

    @property
    def members_quorum(self) -> int:
        """The quorum the node set's membership rules use: every lock's, not a semaphore's
        larger grant quorum (re-seeding must cover the tokens of every lock on the nodes)."""
        return self.set_quorum or self.quorum

    @property
    def n(self) -> int:
        return len(self.names)
