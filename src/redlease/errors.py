"""The one exception tree of redlease.

::

    RedleaseError
    ├── ConfigError            bad input from the user (flag, env, argument); names the field
    ├── KubeError              the Kubernetes API refused or could not be reached
    │   └── KubeConflict       a compare-and-swap write lost: the object changed meanwhile
    └── LockError              anything about one lock; always names the lock
        ├── LockContention     someone else holds the lock (non-blocking acquire refused)
        │   └── LockTimeout    a blocking acquire reached its deadline
        ├── AlreadyHeld        this owner holds the (non-reentrant) lock already
        ├── NotOwned           release/extend refused: the caller does not own the lease
        │   └── ClockStepped   the Redis server's clock stepped: the lease was given up
        ├── LeaseLost          a held lease ended: renewal refused or local deadline passed
        ├── LockUnavailable    outage: node unreachable, timed out, replication not confirmed
        │   ├── QuorumUnavailable  too few nodes answered to form a quorum
        │   └── ReplicationError   WAIT saw fewer replicas than asked: failed closed
        ├── ConnectionLimit    a client-side limit: the connection pool has no connection left
        └── ProtocolError      Redis answered something redlease does not understand

Contention (``LockContention``) and outage (``LockUnavailable``) are different types on purpose:
callers retry the first and alert on the second.
"""

from __future__ import annotations

from collections.abc import Sequence


class RedleaseError(Exception):
    """Root of every exception raised by redlease."""


class ConfigError(RedleaseError, ValueError):
    """Bad user input; ``field`` names the flag, argument or spec field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class KubeError(RedleaseError):
    """The Kubernetes API refused or could not be reached; names the object. ``status`` is the
    HTTP status of a refusal (None: no answer); ``reason`` the message without the request
    (``HTTP 403: forbidden``, ``no answer within 2s``), for an error that names the request
    its own way."""

    def __init__(self, message: str, status: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason if reason is not None else message


class KubeConflict(KubeError):
    """A write refused because the object changed since it was read (someone else wrote first):
    read again and decide again."""


class LockError(RedleaseError):
    """An error about one lock; ``lock`` is its name and ``nodes`` the Redis nodes involved."""

    def __init__(self, lock: str, message: str, *, nodes: Sequence[str] = ()) -> None:
        where = f" (node {', '.join(nodes)})" if nodes else ""
        super().__init__(f"lock {lock!r}: {message}{where}")
        self.lock = lock
        self.nodes = tuple(nodes)
        self.message = message


class LockContention(LockError):
    """The lock is held by someone else."""

    def __init__(
        self,
        lock: str,
        message: str = "held by another owner",
        *,
        holder: str | None = None,
        nodes: Sequence[str] = (),
    ) -> None:
        super().__init__(lock, message, nodes=nodes)
        self.holder = holder


class LockTimeout(LockContention):
    """A blocking acquire did not get the lock before its timeout."""


class AlreadyHeld(LockError):
    """The same owner tried to take a non-reentrant lock twice."""


class NotOwned(LockError):
    """Release or extend by someone who does not own the lease (or after it expired)."""


class ClockStepped(NotOwned):
    """The Redis server's wall clock stepped between two replies (beyond the drift allowance):
    Redis expires leases by that clock, so the lease may have ended early and another holder may
    have been granted. The holder steps down (and gives the lease back if it still had it)."""


class LeaseLost(LockError):
    """A lease this process held has ended (refused renewal, or its local deadline passed)."""


class LockUnavailable(LockError):
    """Redis could not be reached or did not confirm the operation (an outage, not contention)."""


class QuorumUnavailable(LockUnavailable):
    """Fewer nodes than the quorum answered."""


class ReplicationError(LockUnavailable):
    """``WAIT`` reported fewer replicas than required; the operation was undone (fail closed)."""


class ConnectionLimit(LockError):
    """The client ran out of connections (its pool's ``max_connections``, or this process's
    requests queued for one): a limit of this client, not an outage of Redis."""


class ProtocolError(LockError):
    """A Redis reply did not have the expected shape."""


__all__ = [
    "AlreadyHeld",
    "ClockStepped",
    "ConfigError",
    "KubeConflict",
    "KubeError",
    "LeaseLost",
    "LockContention",
    "LockError",
    "LockTimeout",
    "LockUnavailable",
    "NotOwned",
    "ProtocolError",
    "QuorumUnavailable",
    "RedleaseError",
    "ReplicationError",
]
