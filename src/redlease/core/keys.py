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
_NAME_RE = re.compile(r"[A-Za-z0-9._:/@+=-]{1,200}")
_IDENTITY_RE = re.compile(r"[!-~]{1,253}")  # visible ASCII: no spaces, no control characters


def validate_name(name: object, field: str = "lock") -> str:
    """Return ``name`` if it is a usable lock name, else raise :class:`ConfigError`."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ConfigError(
            field,
            f"invalid lock name {name!r}: use 1-200 characters from A-Z a-z 0-9 . _ : / @ + = -",
        )
    return name


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
