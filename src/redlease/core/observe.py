"""Reading a lock's view from Redis, node by node (asyncio): what the sidecar's observer and
`redlease status` share. The operator reads thousands of locks with its own pipelined reader and
builds the same :func:`~redlease.core.view.lock_view` from the same per-node states.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redlease.core import _async
from redlease.core.keys import LockKeys
from redlease.core.protocol import Flow
from redlease.core.state import LockState, read_state_flow
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


async def node_answer(
    node: _async.AsyncNode, keys: Sequence[str], timeout: float, before: Flow | None = None
) -> NodeAnswer:
    """One node's states of ``keys`` (after running ``before``, e.g. a candidate heartbeat),
    or the error that kept it from answering within ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            if before is not None:
                await _async.drive(node, before)
            states: dict[str, LockState] = {}
            for key in keys:
                states[key] = await _async.drive(node, read_state_flow(LockKeys.for_name(key)))
            return states
    except LockError as exc:
        return exc
    except TimeoutError:
        return LockUnavailable(keys[0], f"no answer within {timeout:g}s", nodes=[node.name])


async def read_view(client: Any, keys: Sequence[str], quorum: int, timeout: float) -> LockView:
    """Read every node in parallel and build the lock view."""
    drivers = node_drivers(client, keys[0])
    answers = await asyncio.gather(*(node_answer(d, keys, timeout) for _, d in drivers))
    return lock_view(keys, dict(zip([n for n, _ in drivers], answers, strict=True)), quorum)
