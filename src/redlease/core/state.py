"""Reading a lock's live state (for `redlease status`, the sidecar and the operator)."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from redlease.core import scripts
from redlease.core.intents import ReadState
from redlease.core.keys import LockKeys
from redlease.core.replies import as_int, as_list, as_str
from redlease.core.requests import Call, Request


@dataclass(frozen=True, slots=True)
class Holder:
    """One holder of a lock: a mutex has at most one, a counting semaphore up to its limit."""

    identity: str
    fencing_token: int
    expires_in_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LockState:
    """A snapshot of one lock on one Redis node, all times in server milliseconds."""

    name: str
    now_ms: int
    holder: str | None = None
    fencing_token: int | None = None  # the holder's token (None when free)
    last_fence: int = 0  # the fence counter: the highest token ever issued
    expires_in_ms: int | None = None
    acquired_ms: int | None = None
    renewed_ms: int | None = None
    ttl_ms: int | None = None
    mode: str | None = None  # "x" exclusive, "w" writer; None when free
    count: int = 0
    transitions: int = 0
    last_transition_ms: int | None = None
    readers: int = 0
    waiters: int = 0
    candidates: tuple[str, ...] = field(default=())
    # every holder (a semaphore's, by slot; a mutex: the one above), in slot order; the fields
    # above describe the first of them
    holders: tuple[Holder, ...] = field(default=())

    @property
    def held(self) -> bool:
        return self.holder is not None or self.readers > 0


def status_call(keys: LockKeys, limit: int = 1) -> Call:
    """The STATUS call of the lock ``keys``; ``limit`` > 1: a semaphore's slots are read too."""
    return Call(
        scripts.STATUS,
        (
            keys.lease,
            keys.fence,
            keys.history,
            keys.readers,
            keys.candidates,
            keys.waiters,
            *keys.slots(limit)[1:],
        ),
        (),
        intent=ReadState(),
    )


def _pairs(value: Any) -> dict[str, str]:
    items = [as_str(v) for v in (value or [])]
    return dict(zip(items[::2], items[1::2], strict=False))


def decode_state(keys: LockKeys, reply: object) -> LockState:
    """Decode a STATUS reply into a :class:`LockState` (a node set answers with the
    :class:`LockState` its quorum rule names)."""
    if type(reply) is LockState:
        return reply
    name = keys.name
    items = as_list(reply, name, 8)
    history = _pairs(items[4])
    slots = [(items[1], items[2])]
    if len(items) > 8:
        slots += [tuple(as_list(slot, name, 2)) for slot in as_list(items[8], name, 0)]
    records = [(as_int(p, name, "ttl"), _pairs(fields)) for p, fields in slots]
    held_slots = [(p, d) for p, d in records if d.get("owner")]
    pttl, lease = held_slots[0] if held_slots else records[0]

    def opt(d: dict[str, str], key: str) -> int | None:
        return as_int(d[key], name, key) if key in d else None

    held = bool(lease.get("owner"))
    acquired = opt(lease, "acquired_ms") if held else None
    # a compact record leaves out renewed_ms until extended, count until re-entered, and the
    # mode of an exclusive lease (see grant in core/lua/helpers)
    return LockState(
        name=name,
        now_ms=as_int(items[0], name, "time"),
        holder=lease.get("holder") if held else None,
        fencing_token=opt(lease, "fence") if held else None,
        last_fence=as_int(items[3], name, "fence"),
        expires_in_ms=pttl if held and pttl >= 0 else None,
        acquired_ms=acquired,
        renewed_ms=(opt(lease, "renewed_ms") or acquired) if held else None,
        ttl_ms=opt(lease, "ttl_ms") if held else None,
        mode=lease.get("mode", "x") if held else None,
        count=(opt(lease, "count") or 1) if held else 0,
        transitions=opt(history, "transitions") or 0,
        last_transition_ms=opt(history, "changed_ms"),
        readers=as_int(items[5], name, "readers"),
        candidates=tuple(sorted(as_str(c) for c in (items[6] or []))),
        waiters=as_int(items[7], name, "waiters"),
        holders=tuple(
            Holder(
                d.get("holder", ""),
                as_int(d.get("fence", "0"), name, "fence"),
                p if p >= 0 else None,
            )
            for p, d in held_slots
        ),
    )


def read_state_flow(keys: LockKeys, limit: int = 1) -> Generator[Request, Any, LockState]:
    reply = yield status_call(keys, limit)
    return decode_state(keys, reply)


def heartbeat_flow(
    keys: LockKeys, identity: str, ttl_ms: int
) -> Generator[Request, Any, tuple[int, int]]:
    """Register (``ttl_ms`` > 0) or withdraw (0) a candidate; returns (live candidates, now ms)."""
    reply = yield Call(scripts.HEARTBEAT, (keys.candidates,), (identity, max(0, ttl_ms)))
    items = as_list(reply, keys.name, 2)
    return as_int(items[0], keys.name, "candidates"), as_int(items[1], keys.name, "time")
