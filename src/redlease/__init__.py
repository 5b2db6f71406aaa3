"""redlease: safe leader election and distributed locks on Redis.

Blocking API here; the asyncio API with the same names lives in :mod:`redlease.aio`.
"""

from redlease.core.lease import Lease
from redlease.core.locks import (
    Lock,
    MultiLock,
    ReadLock,
    ReadWriteLock,
    ReentrantLock,
    Renewer,
    Semaphore,
    WriteLock,
)
from redlease.core.rules import MAX_HOLDERS
from redlease.core.state import Holder, LockState
from redlease.election.elector import Elector
from redlease.errors import (
    AlreadyHeld,
    ClockStepped,
    ConfigError,
    ConnectionLimit,
    LeaseLost,
    LockContention,
    LockError,
    LockTimeout,
    LockUnavailable,
    NotOwned,
    ProtocolError,
    QuorumUnavailable,
    RedleaseError,
    ReplicationError,
)

__version__ = "0.1.0"

__all__ = [
    "MAX_HOLDERS",
    "AlreadyHeld",
    "ClockStepped",
    "ConfigError",
    "ConnectionLimit",
    "Elector",
    "Holder",
    "Lease",
    "LeaseLost",
    "Lock",
    "LockContention",
    "LockError",
    "LockState",
    "LockTimeout",
    "LockUnavailable",
    "MultiLock",
    "NotOwned",
    "ProtocolError",
    "QuorumUnavailable",
    "ReadLock",
    "ReadWriteLock",
    "RedleaseError",
    "ReentrantLock",
    "Renewer",
    "ReplicationError",
    "Semaphore",
    "WriteLock",
    "__version__",
]
