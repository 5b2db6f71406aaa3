"""Redis key names of one lock.

Every key of lock ``NAME`` carries the hash tag ``{NAME}``, so all of them live in one Redis
Cluster slot and one Lua script may touch them together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from redlease.errors import ConfigError

PREFIX = "redlease"

# Lock names become part of a hash tag: braces would break the tag, and control characters or
# whitespace make keys that nobody can type in redis-cli.
_NAME = r"[A-Za-z0-9._:/@+=-]{1,200}"
_NAME_RE = re.compile(_NAME)
# A scope (a Kubernetes namespace: a DNS-1123 label) and SCOPE_SEPARATOR, which no lock name
# and no namespace contains: ``team-a#x`` is namespace team-a's key x and nothing else.
SCOPE_SEPARATOR = "#"
_SCOPE = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_SCOPE_RE = re.compile(_SCOPE)
_SCOPED_RE = re.compile(f"(?:{_SCOPE}{SCOPE_SEPARATOR})?{_NAME}")
_IDENTITY_RE = re.compile(r"[!-~]{1,253}")  # visible ASCII: no spaces, no control characters


def validate_name(name: object, field: str = "lock", *, scoped: bool = True) -> str:
    """Return ``name`` if it is a usable lock name, else raise :class:`ConfigError`.

    ``scoped``: also accept a name :func:`scoped_name` made (``SCOPE#NAME``), the Redis name of
    a DistributedLock's key; a DistributedLock's own keys are never scoped (``scoped=False``).
    """
    pattern = _SCOPED_RE if scoped else _NAME_RE
    if not isinstance(name, str) or not pattern.fullmatch(name):
        scope = (
            f" ({SCOPE_SEPARATOR!r} only after a namespace)"
            if scoped
            else f" ({SCOPE_SEPARATOR!r} is reserved: redlease puts the namespace before it)"
        )
        raise ConfigError(
            field,
            f"invalid lock name {name!r}: use 1-200 characters from "
            f"A-Z a-z 0-9 . _ : / @ + = -{scope}",
        )
    return name


def scoped_name(scope: str | None, name: str) -> str:
    """The Redis lock name of key ``name`` of a DistributedLock in namespace ``scope``:
    ``SCOPE#NAME``, so two namespaces never share a key; ``scope`` None (a namespace whose keys
    the cluster admin shares) keeps ``name`` as it is, the name plain ``--lock NAME`` uses.

    ``#`` occurs in no lock name and no namespace, so distinct (scope, name) pairs, and scoped and
    unscoped names, never collide; the whole name is the hash tag (one Cluster slot per key, as
    before), and a Redis ACL pattern ``~redlease:{SCOPE#*`` confines a namespace's Redis user.
    """
    validate_name(name, scoped=False)
    if scope is None:
        return name
    if not _SCOPE_RE.fullmatch(scope):
        raise ConfigError("namespace", f"not a Kubernetes namespace name: {scope!r}")
    return f"{scope}{SCOPE_SEPARATOR}{name}"


def validate_identity(identity: object, field: str = "identity") -> str:
    """A holder identity: 1-253 visible ASCII characters (pod names and host names are).

    Identities are shown by every surface (status, logs, events, terminals), so control
    characters and spaces are refused rather than escaped everywhere.
    """
    if not isinstance(identity, str) or not _IDENTITY_RE.fullmatch(identity):
        raise ConfigError(
            field, f"must be 1-253 visible ASCII characters (no spaces), got {identity!r}"
        )
    return identity


@dataclass(frozen=True, slots=True)
class LockKeys:
    """The Redis keys that make up one lock (README "Redis data model")."""

    name: str
    lease: str  # hash: the lease record; its PX TTL is the lease expiry
    fence: str  # string counter, no TTL, only ever increases
    history: str  # hash: last holder identity, transitions count, time of last change
    waiters: str  # zset: owner token -> registration expiry (server ms) of blocked acquirers
    handoff: str  # string with PX: after a release, only registered waiters may acquire
    wake: str  # list: wake tokens that blocked acquirers BLPOP
    readers: str  # zset: reader owner token -> expiry (server ms)
    writers_waiting: str  # zset: writer owner token -> registration expiry (server ms)
    candidates: str  # zset: candidate identity -> heartbeat expiry (server ms)
    direct: str  # hash: waiter owner token -> 'ttl_ms identity', for a direct hand-off

    def slot(self, i: int) -> str:
        """The lease key of a semaphore's slot ``i``: slot 0 is the mutex's lease key itself
        (a mutex is the one-slot semaphore), slot ``i >= 1`` is ``<lease>:slot:<i>`` (same hash
        tag). Each slot is a lease record like the mutex's (see grant in core/lua/helpers)."""
        return self.lease if i == 0 else f"{self.lease}:slot:{i}"

    def slots(self, n: int) -> tuple[str, ...]:
        """The lease keys of slots ``0 .. n-1`` (slot 0 first)."""
        return tuple(self.slot(i) for i in range(n))

    def grants(self, token: str) -> str:
        """The list a waiter ``token`` BLPOPs for a lease handed over to it directly."""
        return f"{self.wake}:{token}"

    @classmethod
    def for_name(cls, name: str) -> LockKeys:
        base = f"{PREFIX}:{{{validate_name(name)}}}"
        return cls(
            name=name,
            lease=base,
            fence=f"{base}:fence",
            history=f"{base}:history",
            waiters=f"{base}:waiters",
            handoff=f"{base}:handoff",
            wake=f"{base}:wake",
            readers=f"{base}:readers",
            writers_waiting=f"{base}:wwait",
            candidates=f"{base}:candidates",
            direct=f"{base}:direct",
        )

    def all(self) -> tuple[str, ...]:
        """Every key of the lock, the fence counter included."""
        return (
            self.lease,
            self.fence,
            self.history,
            self.waiters,
            self.handoff,
            self.wake,
            self.readers,
            self.writers_waiting,
            self.candidates,
            self.direct,
        )


def name_of(key: str) -> str:
    """The lock name in a key of :class:`LockKeys` (the text of its hash tag)."""
    start = key.index("{") + 1
    return key[start : key.index("}", start)]
