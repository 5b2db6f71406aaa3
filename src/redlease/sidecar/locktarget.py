"""Where the lock API's locks live and the Redis client it holds there (docs/lockapi.md): one
configuration, the election's node set, credentials, key scope and replicas (:class:`ApiTarget`);
one client per target (:class:`Connection`), its pool sized from the parked waits
(:func:`pool_size`)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from redlease.core.connect import Target, connect_target
from redlease.core.gate import GATE
from redlease.core.primitives import DEFAULT_REPLICA_TIMEOUT
from redlease.errors import LockError
from redlease.serving.portlimits import MAX_CONNECTIONS, park_cap
from redlease.sidecar.config import ElectionConfig

CLOSE_TIMEOUT = 2.0  # seconds to release the app's leases at shutdown; the rest expire
POOL_SPARE = 32  # Redis connections beyond the waits' and the gate's: clean-ups, pinned replies


def lock_waits(cap: int) -> int:
    """How many blocking acquires may be parked at once on a port of ``cap`` connections:
    three quarters of the guard's :func:`~redlease.serving.portlimits.park_cap`, so long-polls of
    ``/status`` (``redlease wait``) keep a quarter whatever the app's waits do (96 and 32 of a
    256-connection port's 128)."""
    return max(1, park_cap(cap) * 3 // 4)


def pool_size(cap: int = MAX_CONNECTIONS) -> int:
    """The lock API's Redis pool (per node) for a port of at most ``cap`` connections: one
    connection per parked wait (waiters on one name share one, on distinct names each holds
    one for its wake-up BLPOP), the short requests in flight (the library queues them behind
    :data:`~redlease.core.gate.GATE` per pool), and :data:`POOL_SPARE`. So a holder's extend
    finds a connection whatever the waiters hold."""
    return lock_waits(cap) + GATE + POOL_SPARE


@dataclass(frozen=True, slots=True)
class ApiTarget:
    """Where the API's locks live: the election's node set (with its credentials and TLS), the
    key scope of a DistributedLock and the replicas to WAIT for. Any difference is a new
    target: a Secret rotation too (the old credentials may be revoked, and the leases' handles
    are bound to the old client), as it is for the election (``Elector.reconfigure``)."""

    target: Target
    scope: str | None = None
    replicas: tuple[int, float] = (0, DEFAULT_REPLICA_TIMEOUT)

    @classmethod
    def of(cls, election: ElectionConfig) -> ApiTarget:
        return cls(election.target, election.scope, (election.replicas, election.replica_timeout))


class Connection:
    """The client of one :class:`ApiTarget` and how many requests use it now (a replaced
    client is closed once they are done)."""

    def __init__(self, where: ApiTarget, max_connections: int) -> None:
        self.where = where
        self.client: Any = connect_target(where.target, asyncio=True,
                                          max_connections=max_connections)  # fmt: skip
        self.users = 0
        self.idle = asyncio.Event()
        self.idle.set()

    @contextlib.contextmanager
    def using(self) -> Any:
        self.users += 1
        self.idle.clear()
        try:
            yield self
        finally:
            self.users -= 1
            if not self.users:
                self.idle.set()

    async def close(self, wait: float = 0.0) -> None:
        """Close the client, after the requests using it are done (at most ``wait`` s)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), wait)
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.client.aclose()
        except (OSError, TimeoutError, LockError):
            pass


__all__ = ["CLOSE_TIMEOUT", "POOL_SPARE", "ApiTarget", "Connection", "lock_waits", "pool_size"]
