"""Reading a lock's view from Redis, node by node (asyncio): what the sidecar's observer and
`redlease status` share. The operator reads thousands of locks with its own pipelined reader and
builds the same :func:`~redlease.core.view.lock_view` from the same per-node states.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis.exceptions as rex

from redlease.core import _async
from redlease.core.keys import LockKeys
from redlease.core.quorum import _probe
from redlease.core.requests import Flow
from redlease.core.restart import OPERATOR, RESTART_DELAY, Outside, Probe
from redlease.core.rules import semaphore_quorum
from redlease.core.state import LockState, read_state_flow
from redlease.core.timing import REPLY_GRACE, Budget, within
from redlease.core.view import LockView, NodeAnswer, lock_view
from redlease.errors import LockError, LockUnavailable


def node_drivers(client: Any, lock: str) -> list[tuple[str, _async.AsyncNode]]:
    """(secret-free name, driver) of every counted node behind ``client``: each member of a
    RedLock :class:`~redlease.core.quorum.NodeSet`, else the client itself (a cluster counts
    as one node)."""
    clients = getattr(client, "clients", None) or [client]
    names = getattr(client, "names", None)
    drivers = [_async.AsyncNode(c, lock) for c in clients]
    return list(zip(names or [d.name for d in drivers], drivers, strict=True))


def is_nodeset(client: Any) -> bool:
    """A RedLock node set: its nodes carry markers, and a node may answer without counting."""
    return bool(getattr(client, "is_redlease_nodeset", False))


async def node_probe(client: Any) -> Probe:
    """What a RedLock node's server and marker say now (one pipelined round trip)."""
    pipe = client.pipeline(transaction=False)
    for command in _probe.NODE:
        pipe.execute_command(*command)
    replies = await pipe.execute(raise_on_error=False)
    at = time.monotonic()
    return _probe.node(Probe("", 0.0, at, None, durable=False), replies, at)


async def bounded_probe(node: _async.AsyncNode, budget: Budget) -> Probe:
    """:func:`node_probe` through ``node``'s driver: each command within ``budget`` (a new
    connection made in one attempt), where redis-py's pipeline retries a refused connection
    with back-off for as long as the caller waits."""
    replies: list[object] = []
    for command in _probe.NODE:
        now = time.monotonic()
        try:
            reply = await node.read(
                _probe.MARKER_KEY, *command, timeout=budget.bound(None, now, node.socket_timeout)
            )
        except rex.ResponseError as exc:  # an error reply, as the pipeline hands it over
            reply = exc
        replies.append(reply)
    at = time.monotonic()
    return _probe.node(Probe("", 0.0, at, None, durable=False), replies, at)


async def node_answer(
    node: _async.AsyncNode,
    keys: Sequence[str],
    timeout: float,
    before: Flow | None = None,
    *,
    probe: bool = False,
    limit: int = 1,
) -> tuple[NodeAnswer, Probe | None]:
    """One node's states of ``keys`` (after running ``before``, e.g. a candidate heartbeat),
    or the error that kept it from answering within ``timeout`` seconds (``limit`` > 1: a
    counting semaphore's, its slots read too); with ``probe``, also
    what its server and marker say (read first, so a restart in between shows as a stale
    marker rather than as a counted node). Every request, connecting included, ends by
    ``timeout`` (a :class:`~redlease.core.timing.Budget`), whatever the client's settings; the
    task is cut :data:`~redlease.core.timing.REPLY_GRACE` after that at the latest."""
    seen: Probe | None = None
    budget = within(timeout, time.monotonic())
    try:
        async with asyncio.timeout(timeout + REPLY_GRACE):
            if probe:
                seen = await bounded_probe(node, budget)
            if before is not None:
                await _async.drive(node, before, budget=budget)
            states: dict[str, LockState] = {}
            for key in keys:
                states[key] = await _async.drive(
                    node, read_state_flow(LockKeys.for_name(key), limit), budget=budget
                )
            return states, seen
    except LockError as exc:
        return exc, None
    except rex.RedisError as exc:  # the probe's own commands
        return node.error(exc), None
    except TimeoutError:
        return LockUnavailable(keys[0], f"no answer within {timeout:g}s", nodes=[node.name]), None


async def read_view(
    client: Any,
    keys: Sequence[str],
    quorum: int,
    timeout: float,
    before: Callable[[], Flow] | None = None,
    limit: int = 1,
) -> LockView:
    """Read every node in parallel (after running ``before()`` on each) and build the lock
    view; on a RedLock set, each node's marker is read too, so that nodes that answer but do
    not count are named as such. ``limit`` > 1: the lock is a counting semaphore of that many
    holders (its view lists them all; the quorum per holder is
    :func:`~redlease.core.rules.semaphore_quorum`'s, as its grants need)."""
    drivers = node_drivers(client, keys[0])
    probe = is_nodeset(client)
    if limit > 1:
        quorum = semaphore_quorum(len(drivers), quorum, limit)
    answers = await asyncio.gather(
        *(
            node_answer(d, keys, timeout, before() if before else None, probe=probe, limit=limit)
            for _, d in drivers
        )
    )
    names = [n for n, _ in drivers]
    return lock_view(
        keys,
        {n: a for n, (a, _) in zip(names, answers, strict=True)},
        quorum,
        probes={n: p for n, (_, p) in zip(names, answers, strict=True)} if probe else None,
        restart_delay=getattr(client, "restart_delay", RESTART_DELAY),
        strict_restart=getattr(client, "strict_restart", False),
    )


class Notices:
    """Which nodes that do not count to log, and when (the caller's log, rate-limited).

    A node is logged when it stops counting or the reason's kind changes (rejoining by itself,
    waiting for intact nodes, needs an operator); one that needs an operator is logged again
    every ``every`` seconds while it stays out, one that rejoins by itself is not repeated.
    """

    def __init__(self, every: float = 300.0) -> None:
        self.every = every
        self._seen: dict[str, tuple[str, float]] = {}  # node -> (kind, when logged)

    def due(self, view: LockView, now: float) -> tuple[list[tuple[str, Outside]], list[str]]:
        """(nodes to log now with why, nodes that count again) after reading ``view``."""
        log: list[tuple[str, Outside]] = []
        for node, out in view.outside.items():
            last = self._seen.get(node)
            if (
                last is None
                or last[0] != out.kind
                or (out.kind == OPERATOR and now - last[1] >= self.every)
            ):
                self._seen[node] = (out.kind, now)
                log.append((node, out))
        back = [n for n in self._seen if n not in view.outside and n not in view.errors]
        for node in back:
            del self._seen[node]
        return log, back
