"""Helpers for the multi-key tests: lock names on distinct cluster masters, lease keys, and an
executor that acts on a real server right after a chosen request (a fault at a precise point)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from redis.crc import key_slot

from redlease.core.requests import Call, Request
from redlease.devtools.localredis import RedisServer

MASTERS = 3  # devtools.localcluster.LocalCluster: slots split evenly, in server order


def master_of(name: str) -> int:
    """Index of the LocalCluster server that owns lock ``name``'s slot."""
    return min(key_slot(f"{{{name}}}".encode()) // (16384 // MASTERS), MASTERS - 1)


def spread(base: str, n: int = 3) -> list[str]:
    """``n`` lock names that live on ``n`` different masters, in sorted (acquisition) order."""
    names: dict[int, str] = {}
    i = 0
    while len(names) < n:
        name = f"{base}-{i}"
        names.setdefault(master_of(name), name)
        i += 1
    return sorted(names.values())


def lease_of(server: RedisServer, name: str) -> dict[bytes, bytes]:
    """The lease record of ``name`` on ``server`` (empty: not held there; a cluster node that
    does not serve the name's slot cannot hold it)."""
    c = server.client()
    try:
        return c.hgetall(f"redlease:{{{name}}}")  # type: ignore[return-value]
    except redis.exceptions.MovedError:
        return {}
    finally:
        c.close()


def fence_of(client: redis.Redis, name: str) -> int:
    return int(client.get(f"redlease:{{{name}}}:fence") or 0)


def acquire_of(name: str) -> Callable[[Request], bool]:
    """Matches the acquire request of lock ``name``."""
    return lambda req: (
        isinstance(req, Call) and req.script.name == "acquire" and f"{{{name}}}" in req.keys[0]
    )


class After:
    """A blocking executor that runs ``action`` once, right after ``when(request)`` ran."""

    def __init__(self, inner: Any, when: Callable[[Request], bool], action: Callable[[], Any]):
        self.inner, self.when, self.action, self.done = inner, when, action, False
        self.name, self.lock, self.socket_timeout = inner.name, inner.lock, inner.socket_timeout

    def execute(self, req: Request) -> Any:
        reply = self.inner.execute(req)
        if not self.done and self.when(req):
            self.done = True
            self.action()
        return reply


class AsyncAfter(After):
    """The asyncio version of :class:`After`."""

    async def execute(self, req: Request) -> Any:
        reply = await self.inner.execute(req)
        if not self.done and self.when(req):
            self.done = True
            self.action()
        return reply
