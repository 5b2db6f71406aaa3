"""Pure RedLock quorum math: majority, validity, and decisions over per-node replies.

Nothing here does I/O or reads a clock: the quorum executors (:mod:`redlease.core.quorum`) pass in
what the nodes answered and how long it took, and act on the decision. Each node's answer is
a :class:`Reply`, :class:`Down` (error: the node is unreachable or refused) or :class:`Late`
(no answer within the per-node timeout: the write may still land, so it must be undone).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from redlease.core import scripts
from redlease.core.replies import Outcome
from redlease.core.timing import drift
from redlease.errors import ConfigError, LockError


# not frozen: one is made for every request, and a frozen dataclass's __init__ costs 4x
@dataclass(slots=True)
class Reply:
    """A node answered ``value`` (the raw script reply)."""

    value: object


# not frozen: one is made for every request, and a frozen dataclass's __init__ costs 4x
@dataclass(slots=True)
class Down:
    """A node failed: unreachable, authentication refused, script error..."""

    error: LockError


@dataclass(frozen=True, slots=True)
class Late:
    """No reply within the per-node timeout; the request may still run on the node."""


Result = Reply | Down | Late
LATE = Late()


def majority(n: int) -> int:
    """The smallest count that any two such sets of ``n`` nodes must share a node: n//2 + 1."""
    return n // 2 + 1


def check_quorum(n: int, quorum: int | None) -> int:
    """Validate a configured quorum (default: majority). Below a majority two holders could
    each win a quorum, so that is refused."""
    if n < 1:
        raise ConfigError("nodes", "a node set needs at least one node")
    if quorum is None:
        return majority(n)
    if not isinstance(quorum, int) or not majority(n) <= quorum <= n:
        raise ConfigError("quorum", f"must be between {majority(n)} and {n} for {n} nodes")
    return quorum


MAX_HOLDERS = 64  # the largest limit of a counting semaphore (one lease slot per holder)


def check_limit(limit: object) -> int:
    """Validate a semaphore's ``limit``: how many may hold it at once (1: a mutex)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_HOLDERS:
        raise ConfigError("limit", f"must be an integer from 1 to {MAX_HOLDERS}, got {limit!r}")
    return limit


def semaphore_quorum(n: int, quorum: int, limit: int) -> int:
    """The quorum a semaphore of ``limit`` slots needs on ``n`` RedLock nodes (``quorum``: the
    configured one, at least a majority).

    Each holder holds one slot on each of ``q`` nodes, and each node has ``limit`` slots: the
    ``limit * n`` slots fit ``limit + 1`` holders unless ``(limit + 1) * q > limit * n``, that
    is ``q > limit * n / (limit + 1)``. So ``q = floor(limit * n / (limit + 1)) + 1``, and never
    less than ``quorum``; ``limit`` 1 gives the majority. Example: 3 nodes, limit 2, q = 2:
    A on {1,2}, B on {2,3}, C on {1,3}, every node holds only 2, yet three hold; q = 3 is needed.
    """
    return max(quorum, limit * n // (limit + 1) + 1)


def semaphore_rule(n: int, quorum: int, limit: int) -> str:
    """Why a semaphore on ``n`` nodes needs more than the configured ``quorum`` ('' if not)."""
    needed = semaphore_quorum(n, quorum, limit)
    if needed == quorum:
        return ""
    return (
        f"a semaphore of limit {limit} on {n} nodes needs {needed} nodes per grant "
        f"(floor({limit}*{n}/{limit + 1}) + 1: with fewer, {limit + 1} holders could each hold "
        f"a quorum of slots; docs/semaphore.md)"
    )


def validity(ttl: float, elapsed: float) -> float:
    """Seconds a quorum grant stays valid: TTL - time spent acquiring - drift allowance."""
    return ttl - elapsed - drift(ttl)


def reseed_sources(n: int, quorum: int) -> int:
    """How many nodes with intact data must be read to see every token ever granted.

    Each token was raised on at least ``quorum`` nodes; reading ``n - quorum + 1`` intact nodes
    meets every such set (pigeonhole), even if the node being re-seeded was in it.
    """
    return n - quorum + 1


def jitter(rng: random.Random, low: float = 0.005, high: float = 0.05) -> float:
    """A random retry delay, so that contenders that split the nodes do not collide again."""
    return rng.uniform(low, high)


# --- acquire ---------------------------------------------------------------------------------


# not frozen: one is made for every request, and a frozen dataclass's __init__ costs 4x
@dataclass(slots=True)
class AcquireDecision:
    """What to do after one acquire fan-out.

    ``granted``: the quorum was reached (the caller still raises fences and checks validity).
    ``fence``: the token to grant (max over granted nodes); ``raise_on``: granted nodes whose
    counter is below it. ``undo``: nodes whose lease (or possible lease) must be released when
    the attempt fails. ``unavailable``: too few nodes answered to ever reach the quorum.
    """

    granted: bool
    fence: int = 0
    count: int = 0
    server_ms: int = 0
    transitions: int = 0
    reentry: bool = False
    already: bool = False
    raise_on: tuple[int, ...] = ()
    undo: tuple[int, ...] = ()
    unavailable: bool = False
    holder: str | None = None
    wait_hint_ms: int = -1
    failed_nodes: tuple[int, ...] = ()
    granted_nodes: tuple[int, ...] = ()


def decide_acquire(
    outcomes: Mapping[int, Outcome | Down | Late], quorum: int, members: Iterable[int]
) -> AcquireDecision:
    """Combine decoded acquire replies of the quorum ``members`` into a decision."""
    members = tuple(members)
    every = _all_granted(outcomes, members)
    if every is not None and len(every) >= quorum:  # the common case, kept cheap
        return _grant(members, every, tuple(sorted(members)))
    granted = {i: o for i, o in outcomes.items() if isinstance(o, Outcome) and _granted(o)}
    late = tuple(i for i, o in outcomes.items() if isinstance(o, Late))
    failed = tuple(i for i in members if not isinstance(outcomes.get(i), Outcome))
    already = [o for o in outcomes.values() if isinstance(o, Outcome) and o.status == 2]
    if already:
        return AcquireDecision(False, fence=already[0].fence, already=True, undo=())
    counted = tuple(i for i in granted if i in members)
    undo = tuple(sorted(set(granted) | set(late)))
    if len(counted) >= quorum:
        return _grant(counted, [granted[i] for i in counted], undo)
    answered = [i for i in members if isinstance(outcomes.get(i), Outcome)]
    refused = [outcomes[i] for i in answered if i not in granted]
    holder, hint = _holder(refused, quorum)  # type: ignore[arg-type]
    # contention only if the nodes that answered could have formed a quorum
    return AcquireDecision(
        False,
        undo=undo,
        unavailable=len(answered) < quorum,
        holder=holder,
        wait_hint_ms=hint,
        failed_nodes=failed,
    )


def _granted(o: Outcome) -> bool:
    return o.status == scripts.GRANTED


def _grant(nodes: tuple[int, ...], grants: list[Outcome], undo: tuple[int, ...]) -> AcquireDecision:
    """A quorum of ``nodes`` granted (``grants``, in the same order): the token is the highest
    fence among them, raised on the nodes below it (not for a re-entry, which keeps its
    token)."""
    fence = max(o.fence for o in grants)
    reentry = any(o.transitions == -1 for o in grants)
    raise_on = (
        () if reentry else tuple(i for i, o in zip(nodes, grants, strict=True) if o.fence < fence)
    )
    return AcquireDecision(
        True,
        fence=fence,
        count=max(o.count for o in grants),
        server_ms=max(o.server_ms for o in grants),
        transitions=-1 if reentry else max(o.transitions for o in grants),
        reentry=reentry,
        raise_on=raise_on,
        undo=undo,
        granted_nodes=nodes,
    )


def _all_granted(
    outcomes: Mapping[int, Outcome | Down | Late], members: tuple[int, ...]
) -> list[Outcome] | None:
    """Every node replied, and each is a member that granted: their outcomes, in member
    order; else None."""
    if len(outcomes) != len(members):
        return None
    every = []
    for i in members:
        o = outcomes.get(i)
        if type(o) is not Outcome or o.status != scripts.GRANTED:
            return None
        every.append(o)
    return every


def _holder(refused: Sequence[Outcome], quorum: int) -> tuple[str | None, int]:
    """The holder named by a quorum of refusals and the soonest expiry hint among them."""
    names: dict[str, int] = {}
    for o in refused:
        if o.holder:
            names[o.holder] = names.get(o.holder, 0) + 1
    holder = max(names, key=lambda k: names[k]) if names else None
    hints = [o.wait_hint_ms for o in refused if o.wait_hint_ms >= 0]
    if holder is not None and names[holder] >= quorum and hints:
        return holder, min(hints)
    return holder, -1  # split or reservation: the caller retries after a random jitter


def raise_confirmed(
    decision: AcquireDecision, raised: Mapping[int, Result], fence: int, quorum: int
) -> bool:
    """True when at least ``quorum`` nodes hold a counter >= ``fence`` for this holder."""
    ok = 0
    for i in decision.granted_nodes:
        if i not in decision.raise_on:
            ok += 1
        else:
            r = raised.get(i)
            if isinstance(r, Reply) and _raise_ok(r.value, fence):
                ok += 1
    return ok >= quorum


def _raise_ok(value: object, fence: int) -> bool:
    if not isinstance(value, list) or len(value) < 2:
        return False
    try:
        return int(value[0]) >= fence and int(value[1]) == 1
    except (TypeError, ValueError):
        return False


# --- extend / release / leave ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tally:
    """Per-node results of a write split into succeeded, refused (not owner) and failed."""

    ok: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    values: Mapping[int, list[object]] = field(default_factory=dict)


def tally(results: Mapping[int, Result], members: Iterable[int]) -> Tally:
    """Split replies of the ``{status, ...}`` shape (status 1 = done) by outcome."""
    ok: list[int] = []
    refused: list[int] = []
    failed: list[int] = []
    values: dict[int, list[object]] = {}
    for i in members:
        r = results.get(i, LATE)
        if isinstance(r, Reply) and isinstance(r.value, list) and r.value:
            values[i] = r.value
            (ok if _int(r.value[0]) == 1 else refused).append(i)
        else:
            failed.append(i)
    return Tally(tuple(ok), tuple(refused), tuple(failed), values)


def extend_verdict(t: Tally, quorum: int, elapsed: float, ttl: float) -> str:
    """``ok`` (a quorum extended within the validity), ``lost`` (cannot reach a quorum any
    more: refusals) or ``unavailable`` (too many nodes failed; retry while the lease lasts)."""
    if len(t.ok) >= quorum:
        return "ok" if validity(ttl, elapsed) > 0 else "lost"
    if len(t.ok) + len(t.failed) < quorum:
        return "lost"
    return "unavailable"


def release_verdict(t: Tally, quorum: int) -> str:
    """``ok`` if any node released; ``not_owned`` if enough nodes refused that no quorum could
    still hold our lease; else ``unavailable``."""
    if t.ok:
        return "ok"
    if len(t.failed) < quorum:
        return "not_owned"
    return "unavailable"


def kth_largest(values: Sequence[int], k: int) -> int:
    """The ``k``-th largest value (``WAIT`` acks: replicas confirmed on ``k`` nodes)."""
    ordered = sorted(values, reverse=True)
    return ordered[k - 1] if 0 < k <= len(ordered) else 0


def _int(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        return -1


# --- restart rule ----------------------------------------------------------------------------


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
