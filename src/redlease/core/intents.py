"""What a script call means, and the typed result a node set reports for it.

A :class:`~redlease.core.requests.Call` carries its :data:`Intent`: a layer that runs one call
on several nodes (:mod:`redlease.core.quorum.flows`) decides from the intent, never from which
Lua script the call names, and answers with the intent's typed outcome (:class:`Extended`,
:class:`Released`, :class:`FenceRaised`; an acquire answers with
:class:`~redlease.core.replies.Outcome`) instead of a reply shaped like one node's. The lock
flows (:mod:`redlease.core.flows`) decode a node's raw reply into the same types
(``replies.decode_*``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Acquire:
    """Take the lease for ``token`` for ``ttl_ms`` (exclusive, reentrant, read or write)."""

    token: str
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class Extend:
    """Extend the owner's lease to ``ttl_ms`` from now."""

    ttl_ms: int


@dataclass(frozen=True, slots=True)
class Release:
    """Give the owner's lease back (or one level of a reentrant hold)."""


@dataclass(frozen=True, slots=True)
class Leave:
    """Take the owner off the waiters' queue; nobody waits for the reply."""


@dataclass(frozen=True, slots=True)
class ReadState:
    """Read the lock's live state (the STATUS script)."""


@dataclass(frozen=True, slots=True)
class RaiseFence:
    """Raise the lock's fence counter (and the owner's lease record) to ``fence``."""

    fence: int


Intent = Acquire | Extend | Release | Leave | ReadState | RaiseFence


@dataclass(frozen=True, slots=True)
class Extended:
    """An extension's result: ``ok`` (extended), ``server_ms`` the server's clock reading
    (0 when no node's reading stands for the result)."""

    ok: bool
    server_ms: int = 0


@dataclass(frozen=True, slots=True)
class Released:
    """A release's result: the reentrant count left (0: the lease is gone), None if the
    caller was not the owner."""

    count: int | None


@dataclass(frozen=True, slots=True)
class FenceRaised:
    """A fence raise's result: ``confirmed`` when the counter and the owner's lease record
    hold ``fence`` (False: the lease was gone)."""

    fence: int
    confirmed: bool
