"""What the single-node drivers (:mod:`._sync`, :mod:`._async`) decide alike, without I/O.

The drivers run a script call's first hop themselves (the uncontended request's path, counted
per lock pair by tests/devtools/test_client_calls.py). What follows an error reply or a failed
request is decided here once, as :mod:`redlease.core.quorum.executor` decides a quorum flow:
:func:`rerouted` yields a :data:`Step` wherever it needs I/O (:class:`Send`, :class:`Refresh`,
:class:`Locate`, :data:`ROUTED`), the blocking or asyncio driver performs it and sends back the
result. So which errors re-route a cluster request, how many nodes it may go to, when it is sent
again and when an error is reported are one rule for both flavours (which errors mean a stale
map, and which requests certainly did not run: :mod:`redlease.core.client`). The helpers below
are the other pieces both drivers share: an error reply raised, the connections to close after a
failed exchange, a listener's error handed to its waiters.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex

from redlease.core import client as _redis
from redlease.core.requests import Call

BLPOP_GRACE = 1.0  # a BLPOP's reply is awaited this much longer (Redis checks its timeout at hz)


@dataclass(slots=True)
class Send:
    """Run the call on ``home`` (a connection pool or cluster node); the result is its reply,
    an error reply or the :class:`redis.exceptions.RedisError` raised (returned, not raised)."""

    home: Any


@dataclass(slots=True)
class Refresh:
    """Read the cluster's slot map again after ``error`` on ``home``, waiting for it until
    ``end`` (a monotonic time; None: until read); the result: whether it was read by then."""

    home: Any
    error: BaseException
    end: float | None


@dataclass(slots=True)
class Locate:
    """The home of ``key`` by the slot map now (None: its slot is not covered), a map read
    under way awaited until ``end`` at most."""

    key: str
    end: float | None


class Routed:
    """Run the call through the cluster client's own routing (redis-py's ``ASKING`` for a slot
    being migrated); the result is its reply."""


ROUTED = Routed()

Step = Send | Refresh | Locate | Routed
Steps = Generator[Step, Any, Any]


def rerouted(
    node: _redis.NodeBase, req: Call, home: Any, error: BaseException, end: float | None
) -> Steps:
    """After ``error`` (an error reply, or the redis-py error raised) for ``req``'s first hop to
    ``home``: the steps that follow; returns ``req``'s reply or raises the redlease error.

    A cluster request whose error may mean a stale slot map refreshes it (until ``end``, the
    request's own deadline); one that certainly did not run (:func:`~.client.resendable`) is sent
    to its slot's new node, :data:`~.client.HOPS` nodes in all; a slot being migrated (``ASK``)
    goes through redis-py's routing; anything else is reported, named after the node it
    happened on (a single server: the client)."""
    hops = 1
    while True:
        moved = None
        stale = node.cluster and _redis.stale_map(error)
        if stale and (yield Refresh(home, error, end)) and _redis.resendable(error):
            found = yield Locate(req.keys[0], end)
            moved = found if found is not None and found is not home else None
        if moved is None:
            if isinstance(error, rex.AskError) and not isinstance(error, rex.MovedError):
                return (yield ROUTED)
            raise node.error(error, home if node.cluster else None) from error
        home = moved
        if hops == _redis.HOPS:
            raise node.error(error, home) from error
        hops += 1
        reply = yield Send(home)
        if not isinstance(reply, rex.RedisError):
            return reply
        error = reply


def checked(reply: Any) -> Any:
    """``reply`` of a plain command; an error reply is raised."""
    if isinstance(reply, rex.ResponseError):
        raise reply
    return reply


def to_close(
    node: _redis.NodeBase, owner: str, home: Any, conn: Any, unread: int, exc: BaseException
) -> list[_redis.Pinned]:
    """The connections to close after ``conn`` (from ``home``) failed with ``exc`` with
    ``unread`` replies of ``owner``'s requests not read: ``conn`` itself, unless it is pinned
    for the owner's next request (:func:`~.client.keeps_order`; then the pins it displaced or
    held too long)."""
    if _redis.keeps_order(owner, unread, exc):
        return node.pins.keep(owner, home, conn, unread)
    return [_redis.Pinned(home, conn, unread, 0.0)]


def handed(node: _redis.NodeBase, exc: Exception) -> BaseException:
    """What a listener's waiters raise when its BLPOP failed with ``exc``."""
    return node.error(exc) if isinstance(exc, rex.RedisError) else exc


def map_read(client: Any, home: Any) -> Callable[[], Any]:
    """How cluster ``client`` reads its slot map again after ``home`` (a pool or cluster node)
    failed: its nodes manager's ``initialize``, ``home`` asked last where redis-py supports it."""
    manager = client.nodes_manager
    options = _redis.refresh_options(manager, _redis.home_name(home))
    return lambda: manager.initialize(**options)


def blpop(keys: tuple[str, ...], timeout: float) -> tuple[Any, ...]:
    """The BLPOP of a listener on ``keys`` for ``timeout`` seconds (its reply awaited
    :data:`BLPOP_GRACE` longer)."""
    return ("BLPOP", *keys, round(timeout, 3))


def not_covered(key: str) -> rex.SlotNotCoveredError:
    """The outage of a request whose slot the cluster's slot map did not cover after a read."""
    return rex.SlotNotCoveredError(f"the cluster's slot map does not cover {key!r}")
