"""The leases one sidecar holds for its app (pure; docs/lockapi.md "Limits"): the lease table
(:class:`Leases`) forgets a lease at its local deadline and holds at most :data:`MAX_LEASES`,
counted with the acquires in flight; :class:`Retired` remembers the lease ids of a replaced
Redis target so that they answer 410 for a while."""

from __future__ import annotations

import asyncio
import heapq
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redlease.core.lease import Lease
from redlease.sidecar.lockanswers import ApiError

MAX_LEASES = 1024  # leases one sidecar holds for its app at once (each is a Lock object)
RETIRED_FOR = 3600.0  # seconds a lease id of a replaced target still answers 410 (then 404)
MAX_RETIRED = 4 * MAX_LEASES  # lease ids of replaced targets remembered at most (oldest go)


@dataclass(slots=True)
class Entry:
    """One lease of the app: its lock name, the lock handle holding it, the lease (its local
    deadline moves with each extend), the TTL the app asked for, and a mutex so that one
    lease's extends and releases run one at a time."""

    name: str
    lock: Any  # redlease.aio.Lock
    lease: Lease | None = None
    ttl_ms: int | None = None  # None: the lock's own TTL
    busy: asyncio.Lock = field(default_factory=asyncio.Lock)


class Leases:
    """Lease id -> :class:`Entry`. Ids are random (``secrets.token_urlsafe``): knowing one is
    what lets an app extend or release that lease; an id is valid only with its own name.

    Bounded: an acquire takes a place (:meth:`reserve`) before it asks Redis (so ``limit`` holds
    however many run at once) and :meth:`add` or :meth:`unreserve` ends the reservation; a
    lease is forgotten at its local deadline (an extend pushes the deadline out; one being
    extended or released stays until that ends). The ids of the last ``limit`` leases forgotten
    so are kept (their name only) to answer 410 rather than 404."""

    def __init__(self, limit: int = MAX_LEASES, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.clock = clock
        self.reserved = 0
        self._entries: dict[str, Entry] = {}
        self._deadlines: list[tuple[float, str]] = []  # a heap; stale items are skipped
        self._expired: OrderedDict[str, str] = OrderedDict()  # id -> name

    def __len__(self) -> int:
        self.sweep()
        return len(self._entries)

    def room(self) -> None:
        """429 when the table (with the acquires in flight) is full."""
        self.sweep()
        if len(self._entries) + self.reserved >= self.limit:
            raise ApiError(429, f"this sidecar holds {self.limit} leases already")

    def reserve(self) -> None:
        """Take a place for an acquire about to ask Redis (429 when none is left)."""
        self.room()
        self.reserved += 1

    def unreserve(self) -> None:
        """The reserved acquire was not granted."""
        self.reserved -= 1

    def add(
        self, name: str, lock: Any, lease: Lease | None = None, ttl_ms: int | None = None
    ) -> str:
        """A granted lease (in the place its acquire reserved, if it did)."""
        self.reserved = max(0, self.reserved - 1)
        lease_id = secrets.token_urlsafe(18)
        self._entries[lease_id] = Entry(name, lock, lease, ttl_ms)
        if lease is not None:
            heapq.heappush(self._deadlines, (lease.deadline, lease_id))
        return lease_id

    def get(self, lease_id: str, name: str) -> Entry:
        """The entry of ``lease_id`` under ``name``; 410 when it was forgotten at its deadline,
        404 when unknown or another name's."""
        self.sweep()
        entry = self._entries.get(lease_id)
        if entry is None and self._expired.get(lease_id) == name:
            raise ApiError(410, f"lease {lease_id!r} expired (its local deadline passed)",
                           field="lease")  # fmt: skip
        if entry is None or entry.name != name:
            raise ApiError(404, f"no lease {lease_id!r} on lock {name!r}", field="lease")
        return entry

    def remove(self, lease_id: str) -> None:
        self._entries.pop(lease_id, None)

    def sweep(self) -> None:
        """Forget the leases whose local deadline has passed."""
        now = self.clock()
        later: list[tuple[float, str]] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, lease_id = heapq.heappop(self._deadlines)
            entry = self._entries.get(lease_id)
            if entry is None or entry.lease is None:
                continue
            if entry.lease.deadline > now or entry.busy.locked():  # extended, or in use
                later.append((max(entry.lease.deadline, now), lease_id))
                continue
            del self._entries[lease_id]
            self._expired[lease_id] = entry.name
            if len(self._expired) > self.limit:
                self._expired.popitem(last=False)
        for item in later:
            heapq.heappush(self._deadlines, item)

    def drain(self) -> list[Entry]:
        """Every entry, removed from the table."""
        return list(self.take_all().values())

    def take_all(self) -> dict[str, Entry]:
        """Every lease id and entry, removed from the table."""
        entries, self._entries = self._entries, {}
        self._deadlines.clear()
        return entries


class Retired:
    """Lease ids of a replaced Redis target (pure: times are passed in): each answers 410 for
    :data:`RETIRED_FOR` seconds, then is forgotten (404, which the app treats the same); at
    most :data:`MAX_RETIRED` ids, the oldest forgotten first."""

    def __init__(self, keep: float = RETIRED_FOR, limit: int = MAX_RETIRED) -> None:
        self.keep = keep
        self.limit = limit
        self._ids: OrderedDict[str, tuple[str, float]] = OrderedDict()  # id -> (name, forget)

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, lease_id: str, name: str, now: float) -> None:
        self._ids[lease_id] = (name, now + self.keep)
        self._ids.move_to_end(lease_id)
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)

    def check(self, lease_id: str, name: str, now: float) -> None:
        """410 when ``lease_id`` (of ``name``) was a lease on a replaced target."""
        while self._ids:  # forget the expired ones (they are in the order they were added)
            oldest, (_, forget) = next(iter(self._ids.items()))
            if forget > now:
                break
            del self._ids[oldest]
        known = self._ids.get(lease_id)
        if known is not None and known[0] == name:
            raise ApiError(
                410,
                f"lease {lease_id!r} was lost: the lock's Redis settings changed (nodes, "
                "credentials, key scope or replicas); it was released on the old target",
                field="lease",
            )


__all__ = ["MAX_LEASES", "MAX_RETIRED", "RETIRED_FOR", "Entry", "Leases", "Retired"]
