"""The lock view: one pure function from per-node replies to what every surface shows.

Sidecar ``/status``, its state file and ``/metrics``, ``redlease status`` and the
DistributedLock status all render a :class:`LockView` built here, so they cannot disagree about
who holds a lock, with which fencing token, until when, and how many nodes are healthy.

The quorum rule (the only one): a holder is named only when at least ``quorum`` of the nodes
that answered agree on the same lease (same holder identity and fencing token) for every key of
the lock. A single Redis, or a cluster, is its own quorum of one. When fewer agree, the view
says the lock is free only if no lease could still have a quorum (counting the nodes that did
not answer as possibly holding it); otherwise the holder is *unknown* and the view says why.
``healthy`` is the number of nodes that answered this round and count: a RedLock node that lost
its data (restarted empty, or from an AOF naming an earlier server run) answers but does not
count until it rejoins (:func:`redlease.core.restart.standing`); the view names it and why.
Nothing else writes ``healthy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease.core.restart import RESTART_DELAY, Outside, Probe, standing
from redlease.core.state import Holder, LockState
from redlease.core.times import format_time

NodeAnswer = Mapping[str, LockState] | BaseException  # key -> state, or why the node failed


@dataclass(frozen=True, slots=True)
class NodeHealth:
    total: int
    healthy: int
    quorum: int

    @property
    def reachable(self) -> bool:
        return self.healthy >= self.quorum

    def as_dict(self) -> dict[str, int]:
        return {"total": self.total, "healthy": self.healthy, "quorum": self.quorum}


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """What a view says about a lease: its holder (None: free, or unknown if ``unknown``),
    token, expiry and times, and the lock's counters."""

    holder: str | None = None
    fencing_token: int | None = None
    expires_in_ms: int | None = None
    acquired_ms: int | None = None
    renewed_ms: int | None = None
    last_fence: int = 0
    transitions: int = 0
    last_transition_ms: int | None = None
    readers: int = 0
    waiters: int = 0
    candidates: tuple[str, ...] = ()
    unknown: str | None = None  # why no holder can be named (None: the view is conclusive)
    # every holder a quorum agrees on (a counting semaphore's; a mutex: its holder), by token
    holders: tuple[Holder, ...] = ()

    @property
    def held(self) -> bool:
        return self.holder is not None or self.readers > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyView(Facts):
    """One key as a quorum of nodes sees it."""

    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LockView(Facts):
    """What every surface says about one lock (all keys of a multi-key lease together)."""

    keys: tuple[str, ...]
    nodes: NodeHealth
    per_key: tuple[KeyView, ...] = ()
    healthy_nodes: tuple[str, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)  # unreachable node -> reason
    outside: Mapping[str, Outside] = field(default_factory=dict)  # answered, does not count

    @property
    def lock(self) -> str:
        return self.keys[0]

    @property
    def unhealthy_nodes(self) -> tuple[str, ...]:
        """Nodes that do not count this round: unreachable, or answered but out of quorums."""
        return (*self.errors, *self.outside)

    @property
    def not_counting(self) -> dict[str, str]:
        """Nodes that answered but do not count, and why (what every surface shows)."""
        return {n: o.why for n, o in self.outside.items()}


def _nth_largest(values: Sequence[int], n: int) -> int | None:
    ordered = sorted(values, reverse=True)
    return ordered[n - 1] if 0 < n <= len(ordered) else None


def agreed_holders(states: Sequence[LockState], quorum: int) -> tuple[Holder, ...]:
    """The holders (identity and token) that at least ``quorum`` of ``states`` list, in token
    order: the quorum rule per holder (a counting semaphore's nodes may list its holders in
    different slots). Expiry: the moment the holder stops being on a quorum of nodes."""
    seen: dict[tuple[str, int], list[int]] = {}
    for state in states:
        for h in state.holders:
            seen.setdefault((h.identity, h.fencing_token), []).append(h.expires_in_ms or 0)
    return tuple(
        Holder(identity, token, _nth_largest(expiries, quorum))
        for (identity, token), expiries in sorted(seen.items(), key=lambda kv: kv[0][1])
        if len(expiries) >= quorum
    )


def key_view(key: str, states: Sequence[LockState], quorum: int, unanswered: int) -> KeyView:
    """Apply the quorum rule to one key (``states``: the nodes that answered)."""
    groups: dict[tuple[str, int | None], list[LockState]] = {}
    for s in states:
        if s.holder is not None:
            groups.setdefault((s.holder, s.fencing_token), []).append(s)
    best = max(groups.values(), key=len, default=[])
    changed = [s.last_transition_ms for s in states if s.last_transition_ms is not None]
    common: dict[str, Any] = {
        "key": key,
        "last_fence": max((s.last_fence for s in states), default=0),
        "transitions": max((s.transitions for s in states), default=0),
        "last_transition_ms": max(changed) if changed else None,
        "readers": _nth_largest([s.readers for s in states], quorum) or 0,
        "waiters": max((s.waiters for s in states), default=0),
        "candidates": tuple(sorted({c for s in states for c in s.candidates})),
        "holders": agreed_holders(states, quorum),
    }
    if len(best) >= quorum:
        return KeyView(
            holder=best[0].holder,
            fencing_token=best[0].fencing_token,
            # the moment the lease stops having a quorum of nodes
            expires_in_ms=_nth_largest([s.expires_in_ms or 0 for s in best], quorum),
            acquired_ms=max((s.acquired_ms or 0 for s in best), default=None) or None,
            renewed_ms=max((s.renewed_ms or 0 for s in best), default=None) or None,
            **common,
        )
    if common["holders"]:  # a semaphore whose nodes list its holders in different slots
        first = common["holders"][0]
        return KeyView(
            holder=first.identity, fencing_token=first.fencing_token,
            expires_in_ms=first.expires_in_ms, **common,
        )  # fmt: skip
    if len(best) + unanswered < quorum:
        return KeyView(**common)  # no lease can have a quorum: free
    if not states or len(states) < quorum:
        why = f"only {len(states)} node(s) answered, quorum {quorum}"
    else:
        why = f"no lease of {key!r} is on a quorum of {quorum} nodes yet"
    return KeyView(unknown=why, **common)


def lock_view(
    keys: Sequence[str],
    answers: Mapping[str, NodeAnswer],
    quorum: int,
    *,
    probes: Mapping[str, Probe | None] | None = None,
    restart_delay: float = RESTART_DELAY,
    strict_restart: bool = False,
) -> LockView:
    """The view of a lock over ``keys`` from each node's answer (in node order).

    ``answers`` maps a secret-free node name to that node's per-key states, or to the exception
    that kept it from answering. ``probes`` (RedLock sets only) maps a node name to what its
    server and marker said in the same round: a node that does not count
    (:func:`redlease.core.restart.standing`, in the node set's restart mode) is left out of
    ``healthy`` and of the quorum rule.
    """
    keys = tuple(keys)
    outside = _outside(answers, probes, quorum, restart_delay, strict_restart) if probes else {}
    ok = {n: a for n, a in answers.items() if not isinstance(a, BaseException) and n not in outside}
    errors = {n: _reason(a) for n, a in answers.items() if isinstance(a, BaseException)}
    health = NodeHealth(total=len(answers), healthy=len(ok), quorum=quorum)
    unanswered = len(errors)
    per_key = tuple(
        key_view(k, [a[k] for a in ok.values() if k in a], quorum, unanswered) for k in keys
    )
    primary = per_key[0]
    base: dict[str, Any] = {
        "keys": keys,
        "nodes": health,
        "last_fence": max(k.last_fence for k in per_key),
        "transitions": primary.transitions,
        "last_transition_ms": primary.last_transition_ms,
        "readers": primary.readers,
        "waiters": primary.waiters,
        "candidates": primary.candidates,
        "holders": primary.holders if len(per_key) == 1 else (),
        "per_key": per_key,
        "healthy_nodes": tuple(ok),
        "errors": errors,
        "outside": outside,
    }
    if not health.reachable:
        why = f"only {health.healthy} of {health.total} nodes answered (quorum {quorum})"
        if outside:
            why = (
                f"only {health.healthy} of {health.total} nodes count (quorum {quorum}); "
                f"not counting: {', '.join(outside)}"
            )
        return LockView(unknown=why, **base)
    unknown = [k for k in per_key if k.unknown]
    if unknown:
        return LockView(unknown="; ".join(f"{k.key}: {k.unknown}" for k in unknown), **base)
    leases = {(k.holder, k.fencing_token) for k in per_key}
    if len(leases) == 1:
        holder, token = leases.pop()
        if holder is None:
            return LockView(**base)  # free on every key
        return LockView(
            holder=holder,
            fencing_token=token,
            expires_in_ms=min(k.expires_in_ms or 0 for k in per_key),
            acquired_ms=primary.acquired_ms,
            renewed_ms=min(k.renewed_ms or 0 for k in per_key) or None,
            **base,
        )
    parts = ", ".join(f"{k.key}: {k.holder or 'free'}" for k in per_key)
    return LockView(unknown=f"the keys are not held as one lease ({parts})", **base)


def _outside(
    answers: Mapping[str, NodeAnswer],
    probes: Mapping[str, Probe | None],
    quorum: int,
    restart_delay: float,
    strict_restart: bool,
) -> dict[str, Outside]:
    """The nodes that answered but do not count (``probes``: read in the same round)."""
    names = list(answers)
    seen = [None if isinstance(answers[n], BaseException) else probes.get(n) for n in names]
    now = max((p.at for p in seen if p is not None), default=0.0)
    why = standing(seen, quorum, restart_delay, now, strict_restart)
    return {n: w for n, w in zip(names, why, strict=True) if w is not None}


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


# --- rendering (the snake_case status document of /status, the state file, `redlease status`) ---


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as an RFC 3339 UTC timestamp with millisecond precision."""
    return None if ms is None else format_time(ms / 1000, "milliseconds")


def document(
    view: LockView, *, expires_in_ms: int | None = None, age_ms: int = 0
) -> dict[str, Any]:
    """The lock part of a status document (docs/sidecar.md "HTTP"): holder, fencing token,
    expiry, times, transitions, nodes, why the holder is unknown if it is, and the nodes that
    answered but do not count (node -> why); ``holders``: every holder a quorum agrees on, by
    token (a counting semaphore's up to its limit; a mutex: its holder), see docs/holders.md.

    ``expires_in_ms`` overrides the view's, ``age_ms`` is how long ago it was read (a reader
    that aged the view since it was read). A holder whose slot expired since the read (aged to
    0; the age counts from the read's start, so its lease really has ended) is no longer
    listed: its slot may be another's by now, and naming both would name more holders than
    ever held at once."""
    held = view.holder is not None
    listed = [
        (h, None if h.expires_in_ms is None else h.expires_in_ms - age_ms) for h in view.holders
    ]
    return {
        "holder": view.holder,
        "fencing_token": view.fencing_token,
        "expires_in_ms": (expires_in_ms if expires_in_ms is not None else view.expires_in_ms)
        if held
        else None,
        "acquired_at": iso_ms(view.acquired_ms),
        "renewed_at": iso_ms(view.renewed_ms),
        "transitions": view.transitions,
        "nodes": view.nodes.as_dict(),
        "holder_unknown": view.unknown,
        "nodes_not_counting": view.not_counting,
        "holders": [
            {"holder": h.identity, "fencing_token": h.fencing_token, "expires_in_ms": left}
            for h, left in listed
            if left is None or left > 0
        ],
    }


def empty(keys: Sequence[str], total: int, quorum: int, why: str = "not read yet") -> LockView:
    """The view before any node has been read."""
    return LockView(keys=tuple(keys), nodes=NodeHealth(total, 0, quorum), unknown=why)
