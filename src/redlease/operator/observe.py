"""Combine what each Redis node says about a lock into what the lock library would conclude.

Pure functions over :class:`redlease.core.state.LockState` snapshots. For a RedLock set a holder
counts only when at least ``quorum`` nodes name the same holder identity: its token is the
highest among those nodes and its expiry the ``quorum``-th largest remaining TTL (the moment
the holder stops having a quorum). A single node or a cluster is a quorum of one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from redlease.core.state import LockState


@dataclass(frozen=True, slots=True)
class KeyView:
    """One lock key as a quorum of nodes sees it."""

    key: str
    holder: str | None = None
    fencing_token: int | None = None
    last_fence: int = 0
    expires_in_ms: int | None = None
    transitions: int = 0
    last_transition_ms: int | None = None
    readers: int = 0
    waiters: int = 0
    candidates: tuple[str, ...] = ()

    @property
    def held(self) -> bool:
        return self.holder is not None or self.readers > 0


@dataclass(frozen=True, slots=True)
class Observation:
    """One refresh of one DistributedLock: per-key views plus node health.

    ``keys`` is empty when fewer than ``quorum`` nodes answered (nothing can be concluded).
    ``errors`` maps an unhealthy node's name to a short reason.
    """

    keys: tuple[KeyView, ...]
    healthy: tuple[str, ...]
    unhealthy: tuple[str, ...]
    quorum: int
    read_at: float  # wall-clock seconds (epoch) when the read started
    errors: Mapping[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.healthy) + len(self.unhealthy)

    @property
    def reachable(self) -> bool:
        return len(self.healthy) >= self.quorum

    @property
    def primary(self) -> KeyView | None:
        return self.keys[0] if self.keys else None


def _nth_largest(values: Sequence[int], n: int) -> int | None:
    ordered = sorted(values, reverse=True)
    return ordered[n - 1] if len(ordered) >= n else None


def combine_key(key: str, states: Sequence[LockState], quorum: int) -> KeyView:
    """Combine the answers of the healthy nodes for one key (``quorum`` >= 1)."""
    if not states:
        return KeyView(key)
    votes = Counter(s.holder for s in states if s.holder is not None)
    holder = next((h for h, n in votes.most_common() if n >= quorum), None)
    token: int | None = None
    expires: int | None = None
    if holder is not None:
        mine = [s for s in states if s.holder == holder]
        tokens = [s.fencing_token for s in mine if s.fencing_token is not None]
        token = max(tokens) if tokens else None
        expires = _nth_largest([s.expires_in_ms or 0 for s in mine], quorum)
    changed = [s.last_transition_ms for s in states if s.last_transition_ms is not None]
    return KeyView(
        key=key,
        holder=holder,
        fencing_token=token,
        last_fence=max(s.last_fence for s in states),
        expires_in_ms=expires,
        transitions=max(s.transitions for s in states),
        last_transition_ms=max(changed) if changed else None,
        readers=_nth_largest([s.readers for s in states], quorum) or 0,
        waiters=max(s.waiters for s in states),
        candidates=tuple(sorted({c for s in states for c in s.candidates})),
    )


def combine(
    keys: Sequence[str],
    per_node: Mapping[str, Mapping[str, LockState] | BaseException],
    quorum: int,
    read_at: float,
) -> Observation:
    """Build an :class:`Observation` from each node's answers (or its error), in node order."""
    healthy = tuple(n for n, r in per_node.items() if not isinstance(r, BaseException))
    errors = {n: _reason(r) for n, r in per_node.items() if isinstance(r, BaseException)}
    views: tuple[KeyView, ...] = ()
    if len(healthy) >= quorum:
        answers = [r for r in per_node.values() if not isinstance(r, BaseException)]
        views = tuple(combine_key(k, [a[k] for a in answers if k in a], quorum) for k in keys)
    return Observation(
        keys=views,
        healthy=healthy,
        unhealthy=tuple(errors),
        quorum=quorum,
        read_at=read_at,
        errors=errors,
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
