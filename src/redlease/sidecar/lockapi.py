"""The lock API for apps in any language (``--api-locks PREFIX``; docs/lockapi.md).

``POST /locks/{name}/acquire`` ``{"ttl_ms", "wait_ms"?}`` -> 200 ``{"lease", "fencing_token",
"expires_in_ms"}`` | 409 ``{"holder"}``; ``/extend`` ``{"lease", "ttl_ms"?}`` and ``/release``
``{"lease"}`` -> 200 | 410 (the lease was lost) | 404 (no such lease for this name). Names outside
the prefix: 403; a bad body: 400 naming the field; Redis unreachable: 503; a limit of this
sidecar (waiting requests, Redis connections): 503 with ``Retry-After``, saying which.

Limits (docs/lockapi.md "Limits"): a blocking acquire is parked with the port's guard (at most
:func:`lock_waits` at once, a share of the guard's parked requests that leaves long-polls room);
the lease table forgets a lease at its local deadline and holds at most ``MAX_LEASES``, counted
with the acquires in flight; the Redis pool is sized from the parked waits (:func:`pool_size`).
A hand-off to a blocking acquire is the library's provisional one (at most
:data:`redlease.core.scripts.HANDED_MS` until the waiting sidecar confirms it), so that a
hand-off to a waiter whose sidecar died ends after that bound, not after the waiter's ``ttl_ms``.

The sidecar keeps the Redis connection (its own ``--redis`` target or DistributedLock: one node,
Cluster, Sentinel or a RedLock set, with its credentials and TLS) and one
:class:`redlease.aio.Lock` per lease; the app gets an opaque lease id and the fencing token. The
sidecar does not renew: the app extends. Leases still held are released when the sidecar stops.

One configuration: the API always uses the election's node set, credentials, key scope and
replicas (:class:`ApiTarget`). When a DistributedLock's settings change (``--lock-ref``), the API
switches (:meth:`LockApi.follow`): acquires answer 503 with ``Retry-After`` meanwhile, every
lease of the old target is released there (bounded, best effort) and answers 410 at its next
extend or release, and only then are grants made on the new target, through a new client.

Pure parts first (validation, the lease table, the answers), then :class:`LockApi`, the aiohttp
handlers over them.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web

from redlease.core.aio import Lock
from redlease.core.connect import Target, connect_target
from redlease.core.gate import GATE
from redlease.core.keys import scoped_name, validate_name
from redlease.core.lease import Lease
from redlease.core.observe import read_view
from redlease.core.primitives import DEFAULT_REPLICA_TIMEOUT
from redlease.core.timing import TTL_RANGE
from redlease.core.view import LockView, document
from redlease.errors import (
    AlreadyHeld,
    ConfigError,
    ConnectionLimit,
    LockContention,
    LockError,
    NotOwned,
)
from redlease.serving.httpguard import MAX_CONNECTIONS, guard_of, park_cap
from redlease.sidecar.config import ElectionConfig

log = structlog.get_logger("redlease.sidecar")

MAX_BODY = 4096  # bytes of a request body; the largest valid one is under 200
MAX_WAIT_MS = 60_000  # longest blocking acquire: an HTTP request should not hang for longer
MAX_LEASES = 1024  # leases one sidecar holds for its app at once (each is a Lock object)
TTL_MS = (round(TTL_RANGE[0] * 1000), round(TTL_RANGE[1] * 1000))
# seconds a name's fence counter and history outlive its last lease (Lock forget_after): Redis
# keys per API name are bounded in time, tokens still increase (docs/lockapi.md, "Redis keys")
FORGET_AFTER = 60.0
CLOSE_TIMEOUT = 2.0  # seconds to release the app's leases at shutdown; the rest expire
RETIRED_FOR = 3600.0  # seconds a lease id of a replaced target still answers 410 (then 404)
MAX_RETIRED = 4 * MAX_LEASES  # lease ids of replaced targets remembered at most (oldest go)
READ_TIMEOUT = 2.0  # seconds GET /locks/{name} waits for the nodes' answers
POOL_SPARE = 32  # Redis connections beyond the waits' and the gate's: clean-ups, pinned replies
WAITS = "lock-acquire"  # the kind of parked request a blocking acquire is (ConnectionGuard.park)
RETRY_AFTER_S = 1  # Retry-After of a 503 for a limit of this sidecar or while switching


def lock_waits(cap: int) -> int:
    """How many blocking acquires may be parked at once on a port of ``cap`` connections:
    three quarters of the guard's :func:`~redlease.serving.httpguard.park_cap`, so long-polls of
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


class ApiError(Exception):
    """An answer other than 200: its HTTP status and the JSON body (``field`` names the bad
    one); ``headers`` (``Retry-After``) go with it."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        retry_after: int | None = None,
        **extra: Any,
    ):
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"error": message, **extra}
        self.headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
        if field is not None:
            self.body["field"] = field


# -- validation (pure) -------------------------------------------------------------------------


def validate_prefix(value: str | None, flag: str = "--api-locks") -> str | None:
    """The ``--api-locks`` prefix: None (off) when empty, else a valid start of a lock name."""
    if not value:
        return None
    return validate_name(value, flag, scoped=False)


def check_name(name: str, prefix: str) -> str:
    """``name`` if the app may lock it: 403 outside ``prefix``, 400 if not a lock name."""
    if not name.startswith(prefix):
        raise ApiError(403, f"lock names must start with {prefix!r}", field="name")
    try:
        return validate_name(name, "name", scoped=False)
    except ConfigError as exc:
        raise ApiError(400, exc.message, field="name") from None


def parse_body(raw: bytes) -> dict[str, Any]:
    """A JSON object (an empty body is ``{}``); 400 otherwise."""
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not JSON", field="body") from None
    except RecursionError:  # nested deeper than the parser goes: no valid body is
        raise ApiError(400, "the body is nested too deeply", field="body") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "the body must be a JSON object", field="body")
    return doc


def _integer(doc: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    """``doc[name]``, an integer in ``lo``-``hi``; None when absent; 400 otherwise."""
    if name not in doc:
        return None
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer, got {value!r}", field=name)
    if not lo <= value <= hi:
        raise ApiError(400, f"{name} must be {lo}-{hi}, got {value}", field=name)
    return value


def _lease_id(doc: dict[str, Any]) -> str:
    value = doc.get("lease")
    if not isinstance(value, str) or not value:
        raise ApiError(400, "lease must be the lease id acquire answered", field="lease")
    return value


@dataclass(frozen=True, slots=True)
class AcquireRequest:
    ttl_ms: int
    wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class ExtendRequest:
    lease: str
    ttl_ms: int | None = None  # None: the TTL the lease was acquired with


def parse_acquire(raw: bytes) -> AcquireRequest:
    """``{"ttl_ms": int in the TTL range, "wait_ms": 0-MAX_WAIT_MS (default 0)}``."""
    doc = parse_body(raw)
    if "ttl_ms" not in doc:
        raise ApiError(400, "ttl_ms is required", field="ttl_ms")
    ttl = _integer(doc, "ttl_ms", *TTL_MS)
    assert ttl is not None
    return AcquireRequest(ttl, _integer(doc, "wait_ms", 0, MAX_WAIT_MS) or 0)


def parse_extend(raw: bytes) -> ExtendRequest:
    """``{"lease": id, "ttl_ms"?: int in the TTL range}``."""
    doc = parse_body(raw)
    return ExtendRequest(_lease_id(doc), _integer(doc, "ttl_ms", *TTL_MS))


def parse_release(raw: bytes) -> str:
    """``{"lease": id}``: the lease id."""
    return _lease_id(parse_body(raw))


# -- the leases this sidecar holds for its app (pure) -----------------------------------------


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


# -- answers (pure) ---------------------------------------------------------------------------


def granted(lease_id: str, lease: Lease) -> dict[str, Any]:
    """200 of acquire and extend. ``expires_in_ms`` counts to the local deadline (the TTL less
    the drift allowance, from when the request was sent), so it never overstates the lease."""
    return {
        "lease": lease_id,
        "fencing_token": lease.fencing_token,
        "expires_in_ms": max(0, int(lease.remaining() * 1000)),
    }


def held(name: str, exc: LockContention) -> ApiError:
    """409: the lock is held (by ``holder``, when the nodes said who)."""
    return ApiError(409, f"lock {name!r} is held", holder=exc.holder)


def lost(lease_id: str, exc: NotOwned) -> ApiError:
    """410: the lease ended (expired, or taken after it expired); the id is forgotten."""
    return ApiError(410, f"lease {lease_id!r} was lost: {exc.message}", field="lease")


def unavailable(exc: LockError) -> ApiError:
    """503: Redis did not answer, or (with ``Retry-After``) a limit of this sidecar's client
    did (:class:`~redlease.errors.ConnectionLimit`: not an outage of Redis)."""
    if isinstance(exc, ConnectionLimit):
        why = f"this sidecar's Redis connections are all in use: {exc.message}"
        return ApiError(503, why, retry_after=RETRY_AFTER_S, limit="redis-connections")
    return ApiError(503, f"Redis did not answer: {exc.message}")


def switching() -> ApiError:
    """503 while the API moves to the lock's new Redis settings."""
    return ApiError(
        503,
        "the lock's Redis settings changed: switching to the new ones, retry",
        retry_after=RETRY_AFTER_S,
    )


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


def too_many_waits(acquires: int, parked: int) -> ApiError:
    """503 with ``Retry-After``: the port's share of parked blocking acquires (or all its
    parked places, long-polls included) is taken."""
    why = (f"too many waiting requests ({acquires} blocking acquires, {parked} in all): "
           "retry, or use wait_ms 0")  # fmt: skip
    return ApiError(503, why, retry_after=RETRY_AFTER_S, limit="waiting-requests")


# -- the handlers ------------------------------------------------------------------------------


async def read_capped(request: web.Request, cap: int = MAX_BODY) -> bytes:
    """The body, or 413 past ``cap`` bytes (whether or not a Content-Length says so). The
    port's guard has read it already, within its deadline (``ConnectionGuard.read_body``)."""
    if request.content_length is not None and request.content_length > cap:
        raise ApiError(413, f"the body is over {cap} bytes", field="body")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"the body is over {cap} bytes", field="body") from None
    if len(raw) > cap:
        raise ApiError(413, f"the body is over {cap} bytes", field="body")
    return raw


Handler = Callable[[web.Request], Awaitable[web.Response]]


class LockApi:
    """The lock endpoints of one sidecar: :meth:`add_routes` when the HTTP app is built,
    :meth:`follow` with the election's settings once known (503 until then) and after every
    change, :meth:`close` at shutdown (releases every lease of the app, closes the client)."""

    def __init__(self, prefix: str, identity: str) -> None:
        self.prefix = prefix
        self.identity = identity
        self.leases = Leases()
        self.retired = Retired()
        self._conn: Connection | None = None  # None: not started, or switching
        self._where: ApiTarget | None = None  # the target wanted (the latest followed)
        self._switch: asyncio.Future[None] | None = None
        self._retiring: set[asyncio.Future[None]] = set()  # replaced clients being closed
        self.pool_size = pool_size()  # Redis connections per node (see pool_size)
        self._closing = False

    def follow(self, election: ElectionConfig) -> None:
        """Use the election's settings: the first call connects, a change switches."""
        self.switch_to(ApiTarget.of(election))

    def switch_to(self, where: ApiTarget) -> None:
        """Grant on ``where`` from now on. The first call connects at once; a change stops the
        grants (503 with ``Retry-After``), retires every lease of the old target (410 at its
        next extend or release) and releases them there, bounded by :data:`CLOSE_TIMEOUT`, and
        only then connects to ``where``. The same target again changes nothing."""
        if self._closing or where == self._where:
            return
        first = self._where is None
        self._where = where
        if first:
            self._conn = Connection(where, self.pool_size)
            return
        old, self._conn = self._conn, None
        entries = self.leases.take_all()
        now = time.monotonic()
        for lease_id, entry in entries.items():
            self.retired.add(lease_id, entry.name, now)
        log.warning(
            "lock API: the lock's Redis settings changed, switching; the old target's leases "
            "end (410 at their next extend)",
            leases=len(entries),
        )
        self._switch = asyncio.ensure_future(
            self._switched(where, old, list(entries.values()), self._switch)
        )

    async def _switched(
        self,
        where: ApiTarget,
        old: Connection | None,
        entries: list[Entry],
        before: asyncio.Future[None] | None,
    ) -> None:
        """Release ``entries`` on ``old`` (each after its extend or release under way), then
        serve ``where`` unless a newer change came meanwhile; close ``old`` once unused."""
        if before is not None:
            await asyncio.wait([before])
        if entries:
            await asyncio.wait(
                [asyncio.ensure_future(_retire(e)) for e in entries], timeout=CLOSE_TIMEOUT
            )
        if old is not None:  # a waiting acquire on it ends within MAX_WAIT_MS, then releases
            closing = asyncio.ensure_future(old.close(MAX_WAIT_MS / 1000 + CLOSE_TIMEOUT))
            self._retiring.add(closing)
            closing.add_done_callback(self._retiring.discard)
        if where is self._where and not self._closing:
            self._conn = Connection(where, self.pool_size)
            log.info("lock API: switched to the new Redis settings", released=len(entries))

    async def close(self) -> None:
        """Refuse new requests, release every lease still held (bounded), close the client."""
        self._closing = True
        if self._switch is not None and not self._switch.done():
            await asyncio.wait([self._switch], timeout=CLOSE_TIMEOUT)
        entries = self.leases.drain()
        if entries and self._conn is not None:
            await asyncio.wait(
                [asyncio.ensure_future(_quiet_release(e)) for e in entries], timeout=CLOSE_TIMEOUT
            )
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        for closing in list(self._retiring):
            closing.cancel()

    def add_routes(self, app: web.Application) -> None:
        for verb, handler in (("acquire", self._acquire), ("extend", self._extend),
                              ("release", self._release)):  # fmt: skip
            # a lock name may contain "/": the name is everything between /locks/ and the verb
            app.router.add_post(f"/locks/{{name:.+}}/{verb}", _answering(handler))
        app.router.add_get("/locks/{name:.+}", _answering(self._show))

    def _ready(self, request: web.Request) -> str:
        self.check_ready()
        return check_name(request.match_info["name"], self.prefix)

    def check_ready(self) -> None:
        """503 while the sidecar stops or before the Redis settings are known."""
        if self._closing:
            raise ApiError(503, "the sidecar is stopping")
        if self._where is None:
            raise ApiError(503, "the lock's Redis settings are not read yet")

    def _live(self) -> Connection:
        """The current target's connection; 503 with ``Retry-After`` while switching."""
        if self._conn is None:
            raise switching()
        return self._conn

    def _gone(self, lease_id: str, name: str) -> None:
        """410 for a lease of a replaced target."""
        self.retired.check(lease_id, name, time.monotonic())

    def handle(self, name: str, ttl_ms: int, cls: type[Lock] = Lock, **options: Any) -> Lock:
        """A ``cls`` handle on ``name`` (a lock name the app may use) over the current target
        (503 while switching): the sidecar's identity, the key scope and replicas, keys
        forgotten :data:`FORGET_AFTER` after the last lease; ``options`` go to ``cls``."""
        return self._handle(self._live(), name, ttl_ms, cls, **options)

    def _handle(
        self, conn: Connection, name: str, ttl_ms: int, cls: type[Lock], **options: Any
    ) -> Lock:
        replicas, replica_timeout = conn.where.replicas
        return cls(
            conn.client,
            scoped_name(conn.where.scope, name),
            ttl=ttl_ms / 1000,
            identity=self.identity,
            replicas=replicas,
            replica_timeout=replica_timeout,
            forget_after=FORGET_AFTER,
            **options,
        )

    async def take(
        self,
        name: str,
        ttl_ms: int,
        wait_ms: int = 0,
        cls: type[Lock] = Lock,
        gone: asyncio.Event | None = None,
        **options: Any,
    ) -> tuple[Lock, Lease]:
        """Acquire ``name`` (a :meth:`handle` with ``cls`` and ``options``) on the current
        target, waiting up to ``wait_ms``: 409 when held, 503 when Redis does not answer, or
        when the sidecar began stopping or the target was replaced meanwhile (then the grant is
        given back: nobody would release it, or it is on the old target); 499 when ``gone`` is
        set (the waiting client went away). The native acquire and Dapr's lock (:mod:`.dapr`)
        both take their locks here.

        A hand-off to a waiting sidecar is the library's provisional one
        (:data:`redlease.core.scripts.HANDED_MS`, confirmed by the waiter's extend to
        ``ttl_ms``), so one to a sidecar that died while waiting ends after that bound, not
        after ``ttl_ms``; one that expired before it was picked up is waited for again."""
        conn = self._live()
        with conn.using():
            if not wait_ms:
                lock = self._handle(conn, name, ttl_ms, cls, **options)
                lease = await self._attempt(name, lock.acquire(blocking=False))
                await self._keep(conn, name, lock, gone)
                return lock, lease
            lock = self._handle(conn, name, ttl_ms, cls, **options)
            wait = wait_ms / 1000
            lease = await self._attempt(name, _unless(gone, lock.acquire(timeout=wait)))
            await self._keep(conn, name, lock, gone)
            return lock, lease

    async def _keep(
        self, conn: Connection, name: str, lock: Lock, gone: asyncio.Event | None
    ) -> None:
        """A grant just made stands only if nobody left meanwhile: given back (and 503, or 499)
        when the sidecar began stopping, the target was replaced, or the client went away."""
        why: ApiError | None = None
        if self._closing:  # nobody will release it
            why = ApiError(503, "the sidecar is stopping")
        elif conn is not self._conn:  # granted on a target replaced meanwhile: not valid
            why = switching()
        elif gone is not None and gone.is_set():  # the app hung up meanwhile
            why = ApiError(499, "the client closed the connection while waiting")
        if why is not None:
            await _quiet_release(Entry(name, lock))
            raise why

    async def _attempt(self, name: str, acquire: Awaitable[Lease]) -> Lease:
        """``acquire``'s lease; its errors as answers (409, 499, 503)."""
        try:
            return await acquire
        except LockContention as exc:
            raise held(name, exc) from None
        except AlreadyHeld:  # a given owner token (Dapr's lockOwner) that holds it already
            raise ApiError(409, f"lock {name!r} is held", holder=self.identity) from None
        except LockError as exc:
            raise unavailable(exc) from None

    async def _acquire(self, request: web.Request) -> dict[str, Any]:
        name = self._ready(request)
        ask = parse_acquire(await read_capped(request))
        self._live()
        if not ask.wait_ms:
            return await self.grant(name, ask)
        # a blocking acquire waits long: parked with the port's guard, within the waits' share
        guard = guard_of(request)
        if guard is None:
            return await self.grant(name, ask, asyncio.Event())
        gone = guard.park(request.transport, kind=WAITS, limit=lock_waits(guard.cap))
        if gone is None:
            raise too_many_waits(guard.parked_by[WAITS], guard.parked)
        try:
            return await self.grant(name, ask, gone)
        finally:
            guard.unpark(gone, WAITS)

    async def grant(
        self, name: str, ask: AcquireRequest, gone: asyncio.Event | None = None
    ) -> dict[str, Any]:
        """Acquire ``name`` for the app (the 200 answer) in a place of the lease table reserved
        first; ``gone``: set when the waiting client went away (a blocking acquire's)."""
        self.leases.reserve()
        try:
            lock, lease = await self.take(name, ask.ttl_ms, ask.wait_ms, gone=gone)
        except BaseException:
            self.leases.unreserve()
            raise
        return granted(self.leases.add(name, lock, lease, ask.ttl_ms), lease)

    async def _show(self, request: web.Request) -> dict[str, Any]:
        """``GET /locks/{name}``: who holds the lock, with which fencing token, for how long
        (the lock view every surface shows, :func:`redlease.core.view.document`); read-only,
        so it shows any holder of the name, not only this sidecar's app."""
        name = self._ready(request)
        return {"name": name, **document(await self.view(name))}

    async def view(self, name: str) -> LockView:
        """The lock view of ``name`` (read on every node, the quorum rule applied); 503 when
        too few nodes answered."""
        conn = self._live()
        with conn.using():
            view = await read_view(conn.client, [scoped_name(conn.where.scope, name)],
                                   conn.where.target.quorum, READ_TIMEOUT)  # fmt: skip
        if not view.nodes.reachable:
            raise ApiError(503, f"Redis did not answer: {view.unknown}")
        return view

    async def _extend(self, request: web.Request) -> dict[str, Any]:
        name = self._ready(request)
        ask = parse_extend(await read_capped(request))
        self._gone(ask.lease, name)
        entry = self.leases.get(ask.lease, name)
        async with entry.busy:
            self._gone(ask.lease, name)  # its target was replaced meanwhile: 410
            entry = self.leases.get(ask.lease, name)  # released meanwhile: 404
            ttl_ms = entry.ttl_ms if ask.ttl_ms is None else ask.ttl_ms
            try:
                lease = await entry.lock.extend(None if ttl_ms is None else ttl_ms / 1000)
            except NotOwned as exc:
                self.leases.remove(ask.lease)
                raise lost(ask.lease, exc) from None
            except LockError as exc:  # the lease may still be there: the app may try again
                self._gone(ask.lease, name)
                raise unavailable(exc) from None
            self._gone(ask.lease, name)  # replaced while extending: the switch releases it
        return granted(ask.lease, lease)

    async def _release(self, request: web.Request) -> dict[str, Any]:
        name = self._ready(request)
        lease_id = parse_release(await read_capped(request))
        self._gone(lease_id, name)
        entry = self.leases.get(lease_id, name)
        async with entry.busy:
            self._gone(lease_id, name)
            entry = self.leases.get(lease_id, name)
            try:
                await entry.lock.release()
            except NotOwned as exc:
                self.leases.remove(lease_id)
                raise lost(lease_id, exc) from None
            except LockError as exc:
                self._gone(lease_id, name)
                raise unavailable(exc) from None
            self.leases.remove(lease_id)
        return {"lease": lease_id, "released": True}


def _answering(handler: Callable[[web.Request], Awaitable[dict[str, Any]]]) -> Handler:
    """``handler``'s dict as a 200 JSON answer, an :class:`ApiError` as its status."""

    async def answer(request: web.Request) -> web.Response:
        try:
            return web.json_response(await handler(request))
        except ApiError as exc:
            return web.json_response(exc.body, status=exc.status, headers=exc.headers)

    return answer


async def _unless(gone: asyncio.Event | None, acquire: Awaitable[Lease]) -> Lease:
    """``acquire``'s lease, unless ``gone`` is set first: then the acquire is cancelled (the
    library leaves no lease nor queue place behind) and 499 raised."""
    task = asyncio.ensure_future(acquire)
    if gone is None:
        return await task
    stop = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, LockError):
                await task
    if task.cancelled():
        raise ApiError(499, "the client closed the connection while waiting")
    return task.result()


async def _quiet_release(entry: Entry) -> None:
    """Release at shutdown: a lease already lost, or Redis gone, is no error here."""
    with contextlib.suppress(LockError):
        await entry.lock.release()


async def _retire(entry: Entry) -> None:
    """Release a lease of a replaced target once its extend or release under way is done."""
    async with entry.busy:
        await _quiet_release(entry)


__all__ = [
    "MAX_BODY",
    "MAX_LEASES",
    "MAX_WAIT_MS",
    "AcquireRequest",
    "ApiError",
    "ApiTarget",
    "ExtendRequest",
    "Leases",
    "LockApi",
    "Retired",
    "check_name",
    "lock_waits",
    "parse_acquire",
    "parse_extend",
    "parse_release",
    "pool_size",
    "validate_prefix",
]
