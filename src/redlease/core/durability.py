"""Whether a Redis node keeps its leases across a restart (pure), and reading it (asyncio).

A node restarted without its data frees every lease it held: a second holder can be granted
while the first still holds until its next renewal. Fencing tokens stay above every earlier one
whatever the node keeps (they are seeded from the server clock, see ``grant`` in
:mod:`redlease.core.scripts`); RedLock sets keep such a node out of quorums (the restart rule).
Single nodes get a start-up warning instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

CONFIG = ("appendonly", "appendfsync", "save")


def durable(appendonly: str, appendfsync: str) -> bool:
    """Every acknowledged write survives a restart: AOF with ``appendfsync always``."""
    return appendonly == "yes" and appendfsync == "always"


def restart_loss(config: Mapping[str, str]) -> str | None:
    """What a restart of a node with ``config`` (``CONFIG GET`` values) loses, in words; None
    when nothing (durable) or when it cannot be told (``CONFIG`` refused: no values)."""
    aof = config.get("appendonly")
    if aof is None:
        return None
    if durable(aof, config.get("appendfsync", "")):
        return None
    if aof == "yes":
        return "AOF without appendfsync always: a crash loses the last writes, leases included"
    if config.get("save"):
        return "snapshots only (save, no AOF): a restart loses every lease since the last one"
    return "no persistence (appendonly no, save ''): a restart loses every lease"


async def read_config(client: Any, timeout: float) -> dict[str, str]:
    """The :data:`CONFIG` values of the node behind an asyncio ``client`` ({} when refused by an
    ACL or a managed Redis, or not answered within ``timeout``)."""
    values: dict[str, str] = {}
    try:
        async with asyncio.timeout(timeout):
            for key in CONFIG:
                got = await client.config_get(key)
                for name, value in (got or {}).items():
                    text = value.decode() if isinstance(value, bytes) else str(value)
                    values[name.decode() if isinstance(name, bytes) else str(name)] = text
    except Exception:  # noqa: BLE001 - a check that cannot be made is not an error
        return {}
    return values
