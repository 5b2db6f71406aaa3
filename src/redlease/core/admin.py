"""Administrative operations on a lock name, for operators of a deployment (not for holders).

:func:`force_release_call` frees a lock whatever holds it (the operator's
``redlease.dev/force-release``): every lease slot and reader, the fence counter kept.
:func:`retire` deletes every key of a lock that nobody uses any more. A lock's fence counter and
history never expire (they are what keeps fencing tokens increasing), so lock names made up at
run time grow the keyspace until they are retired. A retired name that is used again seeds its
tokens from the server clock again (docs/security.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from redlease.core import _async, scripts
from redlease.core.keys import LockKeys
from redlease.core.observe import node_drivers, read_view
from redlease.core.replies import as_int, as_list, as_str
from redlease.core.requests import Call
from redlease.core.rules import MAX_HOLDERS
from redlease.errors import LockError, LockUnavailable


def force_release_call(keys: LockKeys, limit: int, handoff_ms: int) -> Call:
    """The FORCE_RELEASE script for the lock ``keys`` with the slots of a counting semaphore of
    ``limit`` (see its header): every holder of those slots is released; waiters are woken and
    get ``handoff_ms`` to take the lock first."""
    first = (keys.lease, keys.readers, keys.waiters, keys.handoff, keys.wake)
    return Call(scripts.FORCE_RELEASE, (*first, *keys.slots(limit)[1:]), (handoff_ms,))


def retire_call(keys: LockKeys) -> Call:
    """The RETIRE script for the lock ``keys`` (every key of the lock, see its header), with
    every slot a counting semaphore of any limit may use (refused while one is held)."""
    first = (keys.lease, keys.readers, keys.waiters, keys.candidates)
    rest = tuple(k for k in keys.all() if k not in first)
    slots = keys.slots(MAX_HOLDERS)[1:]
    return Call(scripts.RETIRE, (*first, *rest, *slots), (len(slots),))


@dataclass(frozen=True, slots=True)
class Retired:
    """What happened on each node: ``deleted`` keys, or why it was ``refused``."""

    per_node: dict[str, str]
    done: bool


async def retire(client: Any, name: str, quorum: int, timeout: float) -> Retired:
    """Retire ``name`` on every node behind ``client``.

    Every node must answer and the lock must be free on all of them first (a node that missed
    the retirement would keep its old counter); then each node deletes the keys only if the
    lock is still free there (checked atomically by the script).
    """
    keys = LockKeys.for_name(name)
    view = await read_view(client, [name], quorum, timeout)
    if view.errors:
        return Retired({n: f"not retired: {why}" for n, why in view.errors.items()}, False)
    if view.held or view.unknown or view.waiters or view.candidates:
        why = (
            f"held by {view.holder}"
            if view.holder
            else view.unknown or "in use (readers, waiters or live candidates)"
        )
        return Retired(dict.fromkeys(view.healthy_nodes, f"not retired: {why}"), False)
    drivers = node_drivers(client, name)
    results = await asyncio.gather(
        *(_retire_one(d, keys, timeout) for _, d in drivers), return_exceptions=False
    )
    per_node = dict(zip([n for n, _ in drivers], results, strict=True))
    return Retired(per_node, all(r.startswith("retired") for r in results))


async def _retire_one(node: _async.AsyncNode, keys: LockKeys, timeout: float) -> str:
    try:
        async with asyncio.timeout(timeout):
            reply = await node.execute(retire_call(keys))
    except LockError as exc:
        return f"not retired: {exc.message}"
    except TimeoutError:
        return f"not retired: {LockUnavailable(keys.name, 'no answer in time').message}"
    items = as_list(reply, keys.name, 2)
    if as_int(items[0], keys.name, "status") == 1:
        return f"retired ({as_int(items[1], keys.name, 'count')} keys deleted)"
    return f"not retired: {as_str(items[1])}"
