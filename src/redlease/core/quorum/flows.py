"""Sans-I/O quorum flows: one single-node request (:mod:`~redlease.core.requests`) fanned out.

The lock handles run the same :mod:`redlease.core.flows` on a node set as on one client.
Each request they yield (acquire, extend, release, ...) is handed to :func:`run`, a generator
that yields :class:`Ready` (connect and probe every node) and :class:`FanOut` (send requests to
several nodes in parallel, collect what answered within the per-node timeout) and finally
returns the typed result of the call's intent (:mod:`redlease.core.intents`), which the
``replies.decode_*`` of the lock flows accept as they accept one node's reply.
Decisions come from the pure functions in :mod:`redlease.core.rules`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from redlease.core import scripts
from redlease.core.intents import (
    Acquire,
    Extend,
    Extended,
    FenceRaised,
    Leave,
    RaiseFence,
    ReadState,
    Release,
    Released,
)
from redlease.core.primitives import Primitive
from redlease.core.quorum import _probe
from redlease.core.replies import Outcome, decode_acquire, decode_extend, decode_release
from redlease.core.requests import Call, Replicate, Request
from redlease.core.rules import (
    LATE,
    REJOINING,
    AcquireDecision,
    Down,
    Late,
    Probe,
    Reply,
    Result,
    Tally,
    birth_list,
    births,
    born_members,
    brand_new,
    clock_seed,
    decide_acquire,
    extend_verdict,
    jitter,
    kth_largest,
    may_rejoin,
    membership,
    raise_confirmed,
    release_verdict,
    reseed_sources,
    standing,
    tally,
    validity,
)
from redlease.core.state import LockState, decode_state
from redlease.core.view import key_view
from redlease.core.waiting import LeaseOwner, quorum_owner
from redlease.errors import ProtocolError, QuorumUnavailable

FENCE_PATTERN = "redlease:{*}:fence"


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

    The reply lists a :class:`~redlease.core.rules.Probe` per node, or :class:`Down` (why it
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


# --- entry point -------------------------------------------------------------------------------


def run(cfg: Settings, req: Request) -> QFlow:
    """Execute one :mod:`redlease.core.requests` request over the node set; return its reply."""
    ready = yield Ready(cfg.node_timeout)
    members = yield from ensure_members(cfg, ready)
    if isinstance(req, Replicate):
        return (yield from _replicate(cfg, members, req))
    if not isinstance(req, Call):
        raise TypeError(f"not a quorum request: {req!r}")
    intent = req.intent
    if type(intent) is Acquire:
        return (yield from acquire(cfg, members, req, intent))
    if type(intent) is Extend:
        return (yield from extend(cfg, members, req, intent))
    if type(intent) is Release:
        return (yield from release(cfg, req))
    if type(intent) is Leave:
        yield FanOut(dict.fromkeys(range(cfg.n), req), 0.0, pinned=False)
        return None  # sent only: nobody waits for a LEAVE's reply
    if type(intent) is ReadState:
        return (yield from read_status(cfg, members, req))
    if type(intent) is RaiseFence:
        return (yield from raise_fence(cfg, members, req, intent))
    return (yield from _any(cfg, members, req))


def unavailable(
    cfg: Settings, what: str, bad: Sequence[int], results: Mapping[int, Result] | None = None
) -> QuorumUnavailable:
    """A :class:`QuorumUnavailable` naming each node that did not count, and why."""
    results = results or {}
    parts = []
    for i in sorted(set(bad)):
        r = results.get(i)
        if isinstance(r, Down):
            why = r.error.message
        elif isinstance(r, Late):
            why = f"no reply within {cfg.node_timeout:g}s"
        elif i in cfg.outside:
            why = cfg.outside[i]
        else:
            why = "failed"
        parts.append(f"{cfg.names[i]}: {why}")
    rule = f"; {cfg.rule}" if cfg.rule else ""
    return QuorumUnavailable(
        cfg.prim.name,
        f"{what}: quorum of {cfg.quorum}/{cfg.n} nodes not reached ({'; '.join(parts)}){rule}",
        nodes=[cfg.names[i] for i in sorted(set(bad))],
    )


# --- membership (restart rule) -----------------------------------------------------------------


def ensure_members(cfg: Settings, replies: Sequence[Probe | Down | None]) -> QFlow:
    """The nodes that count toward quorums now; mark new nodes or re-seed fresh ones first.

    A node without a valid marker lost its data (or is new). A brand-new set is marked at once
    (:func:`_bootstrap`), and so is a fresh node whose server is on a birth list
    (:func:`~redlease.core.rules.born_members`): both are race-free among any number of
    clients. Any other fresh node counts again only after it has been up for ``restart_delay``
    and its fence counters were raised (below, then marked): by default to the maximum the
    reachable intact nodes hold and the seed its server clock gives, however few intact nodes
    answer; in the strict restart mode to the maximum found on
    :func:`~redlease.core.rules.reseed_sources` intact nodes, and not at all with fewer. While
    too few nodes count to serve a quorum, the markers are read again first (an operator may
    have vouched for a node or reset the set: docs/quorum.md, "Bringing nodes back").
    """
    if all(type(p) is Probe and membership(p) == "member" for p in replies):
        if cfg.outside:  # the common case, kept cheap: every node counts
            cfg.outside = {}
        return tuple(range(len(replies)))
    reasons = [p.error.message if isinstance(p, Down) else "not reachable" for p in replies]
    probes = [p if isinstance(p, Probe) else None for p in replies]
    states = [membership(p) for p in probes]
    if "fresh" in states:
        new_set = brand_new(probes)  # read again below anyway
        # an operator may have acted
        if states.count("member") < cfg.members_quorum and not new_set:
            probes = yield from _refresh(cfg, probes)
            new_set = brand_new(probes)
        if new_set:
            probes = yield from _bootstrap(cfg, probes)
        born = born_members(probes)
        if born:
            probes = yield from _mark(cfg, probes, born, births(probes))
        states = [membership(p) for p in probes]
    members = tuple(i for i, s in enumerate(states) if s == "member")
    fresh = [i for i, s in enumerate(states) if s == "fresh"]
    now = cfg.clock()
    why = standing(probes, cfg.members_quorum, cfg.restart_delay, now, cfg.strict_restart)
    cfg.outside = {
        i: reasons[i] if s == "unknown" else (w.why if (w := why[i]) else "not marked")
        for i, s in enumerate(states)
        if s != "member"
    }
    if not fresh:
        return members
    due = [  # the nodes the rule lets rejoin by themselves, once up for restart_delay
        i
        for i in fresh
        if (w := why[i]) is not None
        and w.kind == REJOINING
        and may_rejoin(probes[i], now, cfg.restart_delay)  # type: ignore[arg-type]
        and cfg.reseed_state.get(cfg.names[i], 0.0) <= now
    ]
    if not due:
        return members
    for i in due:
        cfg.reseed_state[cfg.names[i]] = now + 0.5  # at most twice a second per node
    seeds: dict[int, int] = {}
    if cfg.strict_restart:
        maxima = yield from _collect_fences(cfg, members, reseed_sources(cfg.n, cfg.members_quorum))
    else:
        # every counter the intact nodes and the restarted nodes themselves hold (a node
        # restored from a backup keeps counters that are behind: they are raised too), and
        # each restarted node's own clock: the fewer intact nodes, the more the clock carries
        maxima = yield from _collect_fences(cfg, (*members, *due), 0)
        times = yield FanOut({i: Command(("TIME",)) for i in due}, max(1.0, cfg.node_timeout))
        seeds = {i: clock_seed(r.value) for i, r in times.items() if _is_time(r)}
        due = [i for i in due if i in seeds]
    if maxima is None:
        return members
    added = []
    for i in due:
        probe = probes[i]
        assert probe is not None
        floor = seeds.get(i, 0)
        raises: Batch = tuple(
            Call(
                scripts.RAISE_FENCE,
                (key, key[: -len(":fence")]),
                (target, ""),
                intent=RaiseFence(target),
            )
            for key, value in sorted(maxima.items())
            if (target := max(value, floor))
        )
        batch = (*raises, Command(_probe.mark(probe.run_id)))
        done = yield FanOut({i: batch}, max(1.0, cfg.node_timeout))
        if isinstance(done.get(i), Reply):
            yield Marked(i, replace(probe, marker=probe.run_id))
            added.append(i)
            cfg.outside.pop(i, None)
    return tuple(sorted((*members, *added)))


def _bootstrap(cfg: Settings, probes: list[Probe | None]) -> ProbesFlow:
    """Mark a brand-new set, if it is still brand new: read every node again first.

    The probes were taken when each connection was made, at different times. Reading the
    server and the marker again over the same connections (all made before these reads were
    sent; the run id shows that each read reached the process that was probed) shows every
    node fresh at one instant: then there is no history to keep, and every server is written
    on the birth list. If another client has marked some node meanwhile, its marker (and birth
    list) is taken instead.
    """
    now = yield from _reread_all(cfg, probes)
    if brand_new(now):
        return (yield from _mark(cfg, now, range(cfg.n), birth_list(now)))
    return (yield from _remember(probes, now))


def _refresh(cfg: Settings, probes: list[Probe | None]) -> ProbesFlow:
    """``probes`` with every node's marker read again over the same connections: the markers
    an operator changed by hand (docs/quorum.md, "Bringing nodes back") are seen without a
    reconnect. Only while too few nodes count to serve a quorum."""
    now = yield from _reread_all(cfg, probes)
    return (yield from _remember(probes, now))


def _reread_all(cfg: Settings, probes: list[Probe | None]) -> ProbesFlow:
    """Every node's server and marker read again (None: no answer, or another server)."""
    reads = yield FanOut(dict.fromkeys(range(cfg.n), NODE_READ), max(1.0, cfg.node_timeout))
    at = cfg.clock()
    return [_reread(p, reads.get(i), at) for i, p in enumerate(probes)]


def _remember(probes: list[Probe | None], now: list[Probe | None]) -> ProbesFlow:
    """Record the markers that changed between ``probes`` and ``now``; the merged probes."""
    for i, (p, old) in enumerate(zip(now, probes, strict=True)):
        if p is not None and old is not None and (p.marker, p.born) != (old.marker, old.born):
            yield Marked(i, p)
    return [p or old for p, old in zip(now, probes, strict=True)]


def _reread(old: Probe | None, result: Result | None, at: float) -> Probe | None:
    """``old`` updated by a :data:`NODE_READ` of the same server process (else None)."""
    if old is None or not isinstance(result, Reply):
        return None
    new = _probe.node(old, result.value, at)  # type: ignore[arg-type]
    return new if new.run_id == old.run_id else None


def _mark(
    cfg: Settings, probes: list[Probe | None], nodes: Sequence[int], born: frozenset[str]
) -> ProbesFlow:
    """Mark ``nodes`` as intact (with the birth list ``born``); count those that confirm."""
    calls = {i: Command(_probe.mark(p.run_id, born)) for i in nodes if (p := probes[i])}
    done = yield FanOut(calls, max(1.0, cfg.node_timeout))
    probes = list(probes)
    for i in calls:
        p = probes[i]
        if p is not None and isinstance(done.get(i), Reply):
            probes[i] = p = replace(p, marker=p.run_id, born=p.born | born)
            yield Marked(i, p)
    return probes


def _is_time(result: Result | None) -> bool:
    """A ``TIME`` reply: seconds and microseconds."""
    return isinstance(result, Reply) and isinstance(result.value, list | tuple)


def _collect_fences(cfg: Settings, members: Sequence[int], need: int) -> QFlow:
    """Max fence counter per lock over ``members`` (None if fewer than ``need`` answered)."""
    cursors: dict[int, str] = dict.fromkeys(members, "0")
    keys: dict[int, set[str]] = {i: set() for i in members}
    started = False
    while cursors and (not started or any(c != "0" for c in cursors.values())):
        started = True
        calls = {
            i: Command(("SCAN", c, "MATCH", FENCE_PATTERN, "COUNT", 1000))
            for i, c in cursors.items()
        }
        replies = yield FanOut(calls, max(1.0, cfg.node_timeout))
        nxt: dict[int, str] = {}
        for i in cursors:
            r = replies.get(i)
            if not isinstance(r, Reply) or not isinstance(r.value, list | tuple):
                keys.pop(i, None)
                continue
            cursor, found = r.value[0], r.value[1]
            keys[i].update(_text(k) for k in found)
            if _text(cursor) != "0":
                nxt[i] = _text(cursor)
        cursors = nxt
    if len(keys) < need:
        return None
    maxima: dict[str, int] = {}
    calls2 = {i: Command(("MGET", *sorted(ks))) for i, ks in keys.items() if ks}
    if calls2:
        replies = yield FanOut(calls2, max(1.0, cfg.node_timeout))
        for i, ks in keys.items():
            if not ks:
                continue
            r = replies.get(i)
            if not isinstance(r, Reply) or not isinstance(r.value, list):
                return None
            for key, value in zip(sorted(ks), r.value, strict=False):
                if value is not None:
                    maxima[key] = max(maxima.get(key, 0), int(_text(value)))
    return maxima


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --- operations ----------------------------------------------------------------------------------


def _decode(cfg: Settings, result: Result) -> Outcome | Down | Late:
    if isinstance(result, Reply):
        try:
            return decode_acquire(result.value, cfg.prim.name)
        except ProtocolError as exc:
            return Down(exc)
    return result


def acquire(
    cfg: Settings, members: Sequence[int], call: Call, intent: Acquire
) -> Generator[QRequest, Any, Outcome]:
    """RedLock acquire: fan out, decide, raise the fence on a quorum, check validity, or undo."""
    token = intent.token
    ttl = intent.ttl_ms / 1000
    fresh = cfg.fresh(token)
    outside = [i for i in range(cfg.n) if i not in members]
    if len(members) < cfg.quorum:
        raise unavailable(cfg, "cannot acquire", outside)
    raised: Mapping[int, Result] = {}
    start = cfg.clock()
    results = yield FanOut(dict.fromkeys(members, call), cfg.node_timeout)
    outcomes = {i: _decode(cfg, r) for i, r in results.items()}
    d = decide_acquire(outcomes, cfg.quorum, members)
    cfg.wait_on = wait_nodes(outcomes)
    if d.already:
        return Outcome(scripts.ALREADY, fence=d.fence)
    if d.granted:
        confirmed = True
        if d.raise_on:
            raise_calls = {i: cfg.prim.raise_fence(token, d.fence) for i in d.raise_on}
            raised = yield FanOut(raise_calls, cfg.node_timeout)
            confirmed = raise_confirmed(d, raised, d.fence, cfg.quorum)
        if confirmed and validity(ttl, cfg.clock() - start) > 0:
            if len(d.granted_nodes) < len(results):
                yield from _leave(cfg, token, refused(results, d.granted_nodes))
            return Outcome(scripts.GRANTED, d.fence, d.count, d.server_ms, d.transitions)
        if fresh:
            yield from _undo(cfg, token, d.undo)
        if not confirmed:
            bad = [i for i in d.raise_on if not isinstance(raised.get(i), Reply)]
            raise unavailable(cfg, "fencing token not raised on a quorum", [*bad, *outside], raised)
        return Outcome(scripts.HELD, wait_hint_ms=_retry_ms(cfg))  # too slow to count: retry
    if fresh and d.undo:
        yield from _undo(cfg, token, d.undo)
    if d.unavailable:
        raise unavailable(cfg, "cannot acquire", [*d.failed_nodes, *outside], results)
    hint = d.wait_hint_ms
    if hint < 0:
        retry_ms = _retry_ms(cfg)
        hint = retry_ms if d.undo else busy_hint(outcomes.values(), retry_ms)
    return Outcome(scripts.HELD, wait_hint_ms=hint, holder=d.holder or None)


def _retry_ms(cfg: Settings) -> int:
    return round(jitter(cfg.rng) * 1000)


def wait_nodes(outcomes: Mapping[int, Outcome | Down | Late]) -> tuple[int, ...]:
    """The nodes where a refused acquirer waits for its wake-up: those where the holder's lease
    is (its release there wakes the registered waiters), else every node that refused (and so
    registered the caller). Every waiter of the lock sees the same holder: they listen on
    the same node (:meth:`~redlease.core.quorum.executor.QuorumExecutor._wait`), including
    when the holder's quorum leaves out a node that refused it."""
    refused = {
        i: o.status
        for i, o in outcomes.items()
        if isinstance(o, Outcome) and o.status != scripts.GRANTED
    }
    held = tuple(i for i, status in refused.items() if status == scripts.HELD)
    return held or tuple(refused)


def busy_hint(outcomes: Iterable[Outcome | Down | Late], default: int) -> int:
    """How long to wait for a wake token when no node granted the acquire (ms).

    Refused everywhere (held, possibly by several owners of a split, or reserved for the
    waiters a release just woke): the caller is registered as a waiter on every node that
    refused, so the next release or undo wakes it; the soonest expiry named is the fallback.
    Retrying after a short jitter instead would let a refused newcomer (typically the previous
    holder, acquiring again at once) come back as a registered waiter and be admitted through
    the reservation ahead of the waiter that was woken for it.
    """
    hints = [o.wait_hint_ms for o in outcomes if isinstance(o, Outcome) and o.wait_hint_ms >= 0]
    return min(hints) if hints else default


def refused(results: Mapping[int, Result], granted: Sequence[int]) -> list[int]:
    """The nodes where an acquire may have left its caller registered as a waiter: those that
    refused it (a refused acquire registers) and those whose reply is still due."""
    return [i for i, r in results.items() if i not in granted and not isinstance(r, Down)]


def _leave(cfg: Settings, token: str, nodes: Sequence[int]) -> QFlow:
    """Drop ``token``'s waiter registration on ``nodes`` once a quorum granted the lock.

    A registration left there would make each release on that node reserve the lock for a
    waiter that is not waiting (its owner holds the lock, or comes back as the greedy next
    acquirer and is admitted through that reservation ahead of the real waiters). Sent without
    waiting for the replies (the success path does not wait for it), queued behind the acquire
    on the same connection, so it runs after any late registration.
    """
    if nodes:
        yield FanOut(dict.fromkeys(nodes, cfg.prim.leave(token)), 0.0, pinned=False)


def _undo(cfg: Settings, token: str, nodes: Sequence[int]) -> QFlow:
    """Release ``token`` on ``nodes``; queued behind any in-flight acquire on the same node."""
    if nodes:
        yield FanOut(dict.fromkeys(nodes, cfg.prim.release(token)), 0.0, pinned=False)


def extend(
    cfg: Settings, members: Sequence[int], call: Call, intent: Extend
) -> Generator[QRequest, Any, Extended]:
    """Extend on a quorum within the validity (the first node's clock reading stands for it);
    not extended (NotOwned) when that is impossible."""
    ttl = intent.ttl_ms / 1000
    outside = [i for i in range(cfg.n) if i not in members]
    start = cfg.clock()
    results = yield FanOut(dict.fromkeys(members, call), cfg.node_timeout)
    t = tally(results, members)
    verdict = extend_verdict(t, cfg.quorum, cfg.clock() - start, ttl)
    if verdict == "ok":
        return decode_extend(t.values[t.ok[0]], cfg.prim.name)
    if verdict == "lost":
        return Extended(False)
    raise unavailable(cfg, "cannot extend", [*t.failed, *outside], results)


def release(cfg: Settings, call: Call) -> Generator[QRequest, Any, Released]:
    """Release on every node (fresh ones too: they may carry a late write): the reentrant
    count left (the highest a node reports), None when not the owner."""
    everyone = range(cfg.n)
    results = yield FanOut(dict.fromkeys(everyone, call), cfg.node_timeout, pinned=False)
    ok: list[int] = []
    refused: list[int] = []
    failed: list[int] = []
    left = 0
    for i in everyone:
        count = _release_count(cfg, results.get(i, LATE))
        if count is None:
            failed.append(i)
        elif count < 0:
            refused.append(i)
        else:
            ok.append(i)
            left = max(left, count)
    verdict = release_verdict(Tally(tuple(ok), tuple(refused), tuple(failed)), cfg.quorum)
    if verdict == "ok":
        return Released(left)
    if verdict == "not_owned":
        return Released(None)
    raise unavailable(cfg, "cannot release", failed, results)


def _release_count(cfg: Settings, result: Result) -> int | None:
    """A node's release reply (count left, -1 not the owner); None: no usable reply."""
    if not isinstance(result, Reply):
        return None
    try:
        count = decode_release(result.value, cfg.prim.name)
    except ProtocolError:
        return None
    return -1 if count is None else count


def read_status(
    cfg: Settings, members: Sequence[int], call: Call
) -> Generator[QRequest, Any, LockState]:
    """The state the lock view's quorum rule names (:func:`redlease.core.view.key_view`):
    the lease a quorum of nodes agrees on, else no holder."""
    results = yield FanOut(dict.fromkeys(members, call), cfg.node_timeout)
    good = {i: r.value for i, r in results.items() if isinstance(r, Reply)}
    if len(good) < cfg.quorum:
        failed = [i for i in range(cfg.n) if i not in good]
        raise unavailable(cfg, "cannot read state", failed, results)
    keys = cfg.prim.keys
    states = {i: decode_state(keys, v) for i, v in good.items()}
    kv = key_view(keys.name, list(states.values()), cfg.quorum, cfg.n - len(good))
    holders = kv.holders
    pair = (kv.holder, kv.fencing_token)
    # a semaphore's nodes may list the holder the view names in another slot than the first
    holding = [
        i
        for i, s in states.items()
        if (s.holder, s.fencing_token) == pair
        or pair in {(h.identity, h.fencing_token) for h in s.holders}
    ]
    if kv.holder is not None and holding:
        expires = kv.expires_in_ms
        return replace(
            states[holding[0]],
            holder=kv.holder,
            fencing_token=kv.fencing_token,
            expires_in_ms=expires if expires is not None and expires >= 0 else None,
            last_fence=kv.last_fence,
            holders=holders,
        )
    return replace(
        states[next(iter(good))],
        holder=None,
        fencing_token=None,
        expires_in_ms=None,
        acquired_ms=None,
        renewed_ms=None,
        ttl_ms=None,
        mode=None,
        count=0,
        last_fence=kv.last_fence,
        holders=(),
    )


def raise_fence(
    cfg: Settings, members: Sequence[int], call: Call, intent: RaiseFence
) -> Generator[QRequest, Any, FenceRaised]:
    """A multi-key lease puts its token on a lock (counter and lease record) before the grant:
    confirmed once a quorum confirms it, not confirmed if a quorum answered but the lease was
    gone, else QuorumUnavailable."""
    fence = intent.fence
    results = yield FanOut(dict.fromkeys(members, call), cfg.node_timeout)
    everyone = AcquireDecision(True, raise_on=tuple(members), granted_nodes=tuple(members))
    if raise_confirmed(everyone, results, fence, cfg.quorum):
        return FenceRaised(fence, True)
    if sum(isinstance(r, Reply) for r in results.values()) >= cfg.quorum:
        return FenceRaised(fence, False)
    failed = [i for i in range(cfg.n) if not isinstance(results.get(i, LATE), Reply)]
    raise unavailable(cfg, "cannot raise the fencing token", failed, results)


def read_owner(cfg: Settings, give_up: Call) -> Generator[QRequest, Any, LeaseOwner | None]:
    """Who holds the lease of the waiters of the lock given up for together
    (:mod:`redlease.core.waiting`), read once: their one ``give_up`` (GIVE_UP) on every member,
    which reads the lease's owner, holder and fence and takes the waiters off that node's queue
    where another owner holds it, in one script per node (a batch of one LEAVE per waiter kept a
    node busy, and silent, long enough for requests queued behind it to count as late); the
    holder a quorum of the replies agrees on (:func:`~redlease.core.waiting.quorum_owner`), None
    when none does or too few count or answer (each waiter then makes its own last attempt). A
    node where the lease is free keeps their registrations until they lapse."""
    ready = yield Ready(cfg.node_timeout)
    members = yield from ensure_members(cfg, ready)
    if len(members) < cfg.quorum:
        return None
    results = yield FanOut(dict.fromkeys(members, give_up), cfg.node_timeout)
    replies = [r.value for r in results.values() if isinstance(r, Reply)]
    if len(replies) < cfg.quorum:
        return None
    return quorum_owner(give_up.keys[0], replies, cfg.quorum, len(members) - len(replies))


def _replicate(cfg: Settings, members: Sequence[int], req: Replicate) -> QFlow:
    cmd = Command(("WAIT", req.replicas, req.timeout_ms))
    results = yield FanOut(dict.fromkeys(members, cmd), cfg.node_timeout + req.timeout_ms / 1000)
    acks = [int(r.value) for r in results.values() if isinstance(r, Reply)]  # type: ignore[call-overload]
    return kth_largest(acks, cfg.quorum)


def _any(cfg: Settings, members: Sequence[int], call: Call) -> QFlow:
    """Other scripts (heartbeat, force release): run on every member, need a quorum of replies."""
    results = yield FanOut(dict.fromkeys(members, call), cfg.node_timeout)
    good = [r.value for r in results.values() if isinstance(r, Reply)]
    if len(good) < cfg.quorum:
        failed = [i for i in range(cfg.n) if not isinstance(results.get(i, LATE), Reply)]
        raise unavailable(cfg, f"{call.script.name} failed", failed, results)
    return good[0]
