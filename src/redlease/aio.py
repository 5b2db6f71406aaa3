"""The asyncio API: the same classes and semantics as :mod:`redlease`, awaited.

Works with ``redis.asyncio.Redis``, ``redis.asyncio.cluster.RedisCluster`` and an asyncio
:class:`redlease.quorum.NodeSet`. Re-exports only; the code lives in :mod:`redlease.core.aio`.
"""

from redlease.core.aio import (
    AsyncRenewer,
    Lock,
    MultiLock,
    ReadLock,
    ReadWriteLock,
    ReentrantLock,
    Semaphore,
    WriteLock,
)
from redlease.election.elector import AsyncElector as Elector

__all__ = [
    "AsyncRenewer",
    "Elector",
    "Lock",
    "MultiLock",
    "ReadLock",
    "ReadWriteLock",
    "ReentrantLock",
    "Semaphore",
    "WriteLock",
]
