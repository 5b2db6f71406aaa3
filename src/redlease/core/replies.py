"""Decoding script replies into typed results (sans-I/O): one node's raw reply, or the typed
outcome a node set answers with (:mod:`redlease.core.intents`), gives the same type.
Malformed replies raise :class:`~redlease.errors.ProtocolError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redlease.core import scripts
from redlease.core.intents import Extended, FenceRaised, Released
from redlease.errors import ProtocolError


def as_int(value: object, lock: str, what: str) -> int:
    """Decode an integer from a Redis reply (int, bytes or str)."""
    if type(value) is int:  # the common case, kept cheap: this runs on every reply
        return value
    try:
        if isinstance(value, bytes):
            return int(value.decode())
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        raise ProtocolError(lock, f"unexpected {what} in Redis reply: {value!r}") from None


def as_str(value: object) -> str:
    """Decode a string from a Redis reply (bytes or str); ``None``/``False`` give ``''``."""
    if value is None or value is False:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def as_list(value: object, lock: str, length: int) -> list[Any]:
    """Check that a script reply is a list of at least ``length`` items."""
    if not isinstance(value, list) or len(value) < length:
        raise ProtocolError(lock, f"unexpected Redis reply: {value!r}")
    return value


# not frozen: one is made for every request, and a frozen dataclass's __init__ costs 4x
@dataclass(slots=True)
class Outcome:
    """A decoded acquire reply."""

    status: int
    fence: int = 0
    count: int = 0
    server_ms: int = 0
    transitions: int = 0
    wait_hint_ms: int = -1
    holder: str | None = None
    blocked: tuple[int, ...] = ()  # 1-based positions of the locks that refused (multi-key)


def decode_acquire(reply: object, lock: str) -> Outcome:
    """An acquire reply: a grant is the string 'fence count now_ms transitions' (the scripts
    build it from strings, cheaper for Redis than a table), anything else a list; a node set
    answers with the :class:`Outcome` it decided (:mod:`redlease.core.intents`)."""
    if isinstance(reply, bytes | str):
        return _decode_grant(reply, lock)
    if type(reply) is Outcome:  # a quorum flow's reply, decoded already
        return reply
    items = as_list(reply, lock, 2)
    status = as_int(items[0], lock, "status")
    if status == scripts.GRANTED:
        if len(items) < 4:
            raise ProtocolError(lock, f"unexpected Redis reply: {reply!r}")
        transitions = as_int(items[4], lock, "transitions") if len(items) > 4 else 0
        return Outcome(
            status,
            fence=as_int(items[1], lock, "fence"),
            count=as_int(items[2], lock, "count"),
            server_ms=as_int(items[3], lock, "time"),
            transitions=transitions,
        )
    if status == scripts.ALREADY:
        return Outcome(status, fence=as_int(items[1], lock, "fence"))
    if status in (scripts.HELD, scripts.RESERVED):
        holder = as_str(items[2]) if len(items) > 2 else ""
        return Outcome(
            status,
            wait_hint_ms=as_int(items[1], lock, "ttl"),
            holder=holder or None,
            blocked=tuple(as_int(i, lock, "position") for i in items[3:]),
        )
    raise ProtocolError(lock, f"unknown acquire status {status}")


def _decode_grant(reply: bytes | str, lock: str) -> Outcome:
    try:
        fence, count, server_ms, transitions = map(int, reply.split())
    except ValueError:
        raise ProtocolError(lock, f"unexpected Redis reply: {reply!r}") from None
    return Outcome(
        scripts.GRANTED, fence=fence, count=count, server_ms=server_ms, transitions=transitions
    )


def decode_handed(value: object, lock: str) -> Outcome:
    """Decode a lease handed over directly: 'fence now_ms transitions' (see ``pass_on`` in
    core/lua/helpers)."""
    parts = as_str(value).split()
    if len(parts) != 3:
        raise ProtocolError(lock, f"unexpected hand-off grant: {value!r}")
    fence, server_ms, transitions = (as_int(p, lock, "grant") for p in parts)
    return Outcome(
        scripts.GRANTED, fence=fence, count=1, server_ms=server_ms, transitions=transitions
    )


def decode_release(reply: object, lock: str) -> int | None:
    """A release reply: the reentrant count left (0: the lease is gone), None if not the owner;
    a node set answers with :class:`~redlease.core.intents.Released`."""
    if type(reply) is Released:
        return reply.count
    count = as_int(reply, lock, "release count")
    return None if count < 0 else count


def decode_raise(reply: object, lock: str) -> FenceRaised:
    """A RAISE_FENCE reply ``{fence, confirmed}``; a node set answers with
    :class:`~redlease.core.intents.FenceRaised`."""
    if type(reply) is FenceRaised:
        return reply
    items = as_list(reply, lock, 2)
    return FenceRaised(as_int(items[0], lock, "fence"), as_int(items[1], lock, "raise") == 1)


def decode_extend(reply: object, lock: str) -> Extended:
    """An extend reply ``{status, ttl, now_ms}`` (status 1: extended); a node set answers
    with :class:`~redlease.core.intents.Extended`."""
    if type(reply) is Extended:
        return reply
    items = as_list(reply, lock, 3)
    return Extended(as_int(items[0], lock, "status") == 1, as_int(items[2], lock, "time"))
