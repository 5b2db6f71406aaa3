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
