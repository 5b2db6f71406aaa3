"""The restart rule of a RedLock node set (pure; docs/quorum.md "Bringing nodes back"): what a
node says about itself (:class:`Probe`), whether it counts (``member``, ``fresh``), when a node
that lost its data may rejoin, the birth lists that let a brand-new set and re-created servers
count at once, and why a node does not count yet (:func:`standing`). Nothing here does I/O or
reads a clock: the quorum flows (:mod:`redlease.core.quorum.members`) pass the times in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redlease.core.rules import reseed_sources


@dataclass(frozen=True, slots=True)
class Probe:
    """What a node said about itself on one connection."""

    run_id: str  # the server process (a new one after every restart)
    uptime: float  # seconds the server has been up, at ``at``
    at: float  # monotonic time of the probe
    marker: str | None  # run id stored in the node's redlease marker (None: no marker)
    durable: bool  # appendonly yes + appendfsync always: restarts keep every write
    born: frozenset[str] = frozenset()  # the marker's birth list (see :func:`born_members`)
    functions: bool = False  # the redlease Functions library is loaded there (FCALL, not EVALSHA)


def membership(probe: Probe | None) -> str:
    """``member`` (its marker names the server running now: data intact, counts toward
    quorums), ``fresh`` (no marker, or one naming another server run: restarted empty, brand
    new, or restarted from an AOF that may be an older backup) or ``unknown`` (never reached).

    Persistence does not make a foreign marker trusted: a server restarted from its own AOF and
    one restored from an older backup look the same (both carry an earlier run id), and the
    second has forgotten leases and fence raises. Both rejoin by the restart rule."""
    if probe is None:
        return "unknown"
    if probe.marker is not None and probe.marker == probe.run_id:
        return "member"
    return "fresh"


def may_rejoin(probe: Probe, now: float, restart_delay: float) -> bool:
    """A fresh node may be re-seeded once it has been up for ``restart_delay`` (the longest
    TTL): by then every lease it forgot has expired everywhere."""
    return rejoin_in(probe, now, restart_delay) <= 0


UPTIME_GRAIN = 1.0  # INFO's uptime_in_seconds: whole wall seconds now minus whole seconds at start


def rejoin_in(probe: Probe, now: float, restart_delay: float) -> float:
    """Seconds until a fresh node has been up for ``restart_delay`` (<= 0: it may rejoin).

    The server reports its uptime as the difference of two whole wall-clock seconds: one
    second reported may be a few milliseconds up, so a second of it is not counted."""
    up = max(0.0, probe.uptime - UPTIME_GRAIN)
    return restart_delay - (up + (now - probe.at))


def brand_new(probes: Sequence[Probe | None]) -> bool:
    """Every node answered and none carries a marker: the set is new (or every node lost its
    data, or an operator deleted the markers to start a new history).

    A marker naming an earlier server run is not new: its node kept (or was restored with)
    data of this set, leases and fence counters that may be behind, so a set whose every node
    restarted that way comes back by the restart rule (:func:`standing`), not as a new set.
    Only a view of one instant may start a history (see docs/quorum.md): the caller reads the
    markers again over the same connections before it marks the nodes.
    """
    return all(p is not None and p.marker is None for p in probes)


def birth_list(probes: Sequence[Probe | None]) -> frozenset[str]:
    """The run ids of every node's server (empty unless every node answered)."""
    if any(p is None for p in probes):
        return frozenset()
    return frozenset(p.run_id for p in probes if p is not None)


def births(probes: Sequence[Probe | None]) -> frozenset[str]:
    """Every server named on a birth list that some node's marker carries."""
    none: frozenset[str] = frozenset()
    return none.union(*(p.born for p in probes if p is not None))


def born_members(probes: Sequence[Probe | None]) -> tuple[int, ...]:
    """Fresh nodes that are safe to mark at once: their server is on the set's birth list.

    Marking a brand-new set writes on every node the run ids of all its servers, seen fresh at
    one instant (the *birth list*). A server on that list has run ever since (a restart gives a
    new run id) and had never been marked before (it was fresh, and a marker only disappears
    with its server's data): it lost nothing, it was just not marked yet. A node that restarted
    without its data runs a new server, which no birth list names.
    """
    born = births(probes)
    return tuple(
        i
        for i, p in enumerate(probes)
        if p is not None and p.run_id in born and membership(p) == "fresh"
    )


def clock_seed(time_reply: Sequence[object]) -> int:
    """The fence seed a server's clock gives: a ``TIME`` reply in microseconds, the unit of
    a clock-seeded token (``grant`` in core/lua/helpers). Re-seeding a restarted node raises
    its counters at least this high, so its next token is above every token issued before
    it restarted, as long as the servers' clocks do not step back and agree within
    ``restart_delay`` (docs/quorum.md, "Why tokens still increase after a re-seed")."""
    seconds, micros = (int(_text(v)) for v in time_reply[:2])
    return seconds * 1_000_000 + micros


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- nodes that do not count -------------------------------------------------------------------

RESTART_DELAY = 60.0  # default seconds a node that lost its data stays out (>= the longest TTL)
REJOINING = "rejoining"  # rejoins by itself (after restart_delay, re-seeded: see standing)
WAITING = "waiting"  # rejoins by itself once enough intact nodes answer again
OPERATOR = "operator"  # cannot rejoin by itself: only an operator's hand brings it back


@dataclass(frozen=True, slots=True)
class Outside:
    """Why a node that answered does not count toward quorums, and whether it comes back by
    itself (``kind``: :data:`REJOINING`, :data:`WAITING` or :data:`OPERATOR`)."""

    kind: str
    why: str
    action: str = ""  # what an operator must do (kind OPERATOR), or ""
    # seconds until it rejoins by itself (kind REJOINING; 0: at the next lock operation)
    rejoin_in: float | None = None


def standing(
    probes: Sequence[Probe | None],
    quorum: int,
    restart_delay: float,
    now: float,
    strict: bool = False,
) -> list[Outside | None]:
    """For each node: None if it counts (or was not reached: unreachable is reported apart),
    else why not. The same rule as the quorum flows apply before every operation: a fresh node
    counts at once when the whole set is brand new or its server is on a birth list (it is
    marked at first contact); any other fresh node rejoins by itself after ``restart_delay``,
    its fence counters raised to the maximum the reachable intact nodes hold and the seed its
    server clock gives (:func:`clock_seed`; docs/quorum.md, "The restart rule"). With
    ``strict`` (the opt-in strict restart mode, for those who will not rest fencing on clocks)
    it rejoins only once :func:`reseed_sources` intact nodes can restore its fence counters,
    and with fewer intact nodes than that it cannot rejoin by itself."""
    n = len(probes)
    new_set = brand_new(probes)
    born = births(probes)
    members = sum(1 for p in probes if membership(p) == "member")
    unreached = sum(1 for p in probes if p is None)
    unmarked = all(p is None or p.marker is None for p in probes)
    sources = reseed_sources(n, quorum)
    out: list[Outside | None] = []
    for p in probes:
        if p is None or membership(p) == "member" or new_set or p.run_id in born:
            out.append(None)
            continue
        if unmarked:  # a new set (or one whose every reachable node lost its data)
            out.append(
                Outside(WAITING, "not marked yet; the set is marked once every node answers")
            )
            continue
        lost = (
            "restarted without its data"
            if p.marker is None
            else f"its data is from an earlier server run {p.marker[:12]} (restarted, or "
            "restored from a backup)"
        )
        left = rejoin_in(p, now, restart_delay)
        if not strict or members >= sources:
            when = f"in {left:.0f}s" if left > 0 else "at the next lock operation"
            out.append(Outside(REJOINING, f"{lost}; rejoins by itself {when}", "", max(0.0, left)))
        elif members + unreached >= sources:
            out.append(
                Outside(WAITING, f"{lost}; rejoins once {sources} nodes with their data answer")
            )
        else:
            why = (
                f"{lost}; cannot rejoin by itself: {members} of {n} nodes kept their data, "
                f"{sources} needed to restore its fencing counters (docs/quorum.md, 'Bringing "
                "nodes back')"
            )
            out.append(Outside(OPERATOR, why, recovery(p, restart_delay)))
    return out


def recovery(probe: Probe, restart_delay: float) -> str:
    """What an operator does to bring back a node that cannot rejoin by itself (the procedure
    of docs/quorum.md, "Bringing nodes back")."""
    new_history = (
        f"once every node is up and has been for {restart_delay:g}s, run `DEL redlease:node` "
        "on every node of the set to start a new fencing history (docs/quorum.md, 'Bringing "
        "nodes back')"
    )
    if probe.marker is None:
        return new_history
    return (
        "if this node's data is its own latest (restarted from its AOF, not restored from an "
        f"older backup), run `HSET redlease:node run_id {probe.run_id}` on it; otherwise "
        + new_history
    )
