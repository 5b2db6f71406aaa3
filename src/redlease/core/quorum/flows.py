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

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import replace
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
from redlease.core.quorum.members import ensure_members
from redlease.core.quorum.protocol import (
    Command,
    FanOut,
    QFlow,
    QRequest,
    Ready,
    Settings,
)
from redlease.core.replies import Outcome, decode_acquire, decode_extend, decode_release
from redlease.core.requests import Call, Replicate, Request
from redlease.core.rules import (
    LATE,
    AcquireDecision,
    Down,
    Late,
    Reply,
    Result,
    Tally,
    decide_acquire,
    extend_verdict,
    jitter,
    kth_largest,
    raise_confirmed,
    release_verdict,
    tally,
    validity,
)
from redlease.core.state import LockState, decode_state
from redlease.core.view import key_view
from redlease.core.waiting import LeaseOwner, quorum_owner
from redlease.errors import ProtocolError, QuorumUnavailable

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
