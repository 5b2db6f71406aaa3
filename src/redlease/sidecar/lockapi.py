"""The lock API for apps in any language (``--api-locks PREFIX``; docs/lockapi.md).

``POST /locks/{name}/acquire`` ``{"ttl_ms", "wait_ms"?}`` -> 200 ``{"lease", "fencing_token",
"expires_in_ms"}`` | 409 ``{"holder"}``; ``/extend`` ``{"lease", "ttl_ms"?}`` and ``/release``
``{"lease"}`` -> 200 | 410 (the lease was lost) | 404 (no such lease for this name). Names outside
the prefix: 403; a bad body: 400 naming the field; Redis unreachable: 503; a limit of this
sidecar (waiting requests, Redis connections): 503 with ``Retry-After``, saying which.

A blocking acquire is parked with the port's guard (at most
:func:`~redlease.sidecar.locktarget.lock_waits` at once). A hand-off to a blocking acquire is
the library's provisional one (at most :data:`redlease.core.scripts.HANDED_MS` until the waiting
sidecar confirms it), so that a hand-off to a waiter whose sidecar died ends after that bound.

The sidecar keeps the Redis connection and one :class:`redlease.aio.Lock` per lease; the app
gets an opaque lease id and the fencing token. The sidecar does not renew: the app extends.
Leases still held are released when the sidecar stops. When a DistributedLock's settings change
(``--lock-ref``), the API switches (:meth:`LockApi.follow`): acquires answer 503 with
``Retry-After`` meanwhile, every lease of the old target is released there (bounded, best
effort) and answers 410 at its next extend or release, and only then are grants made on the new
target, through a new client.

The pure parts live apart: the requests and answers (:mod:`.lockanswers`), the lease table
(:mod:`.leasetable`), the target and its client (:mod:`.locktarget`); here are :class:`LockApi`
and the aiohttp handlers over them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Any

import structlog
from aiohttp import web

from redlease.core.aio import Lock
from redlease.core.keys import scoped_name
from redlease.core.lease import Lease
from redlease.core.observe import read_view
from redlease.core.view import LockView, document
from redlease.errors import AlreadyHeld, LockContention, LockError, NotOwned
from redlease.serving.httpguard import guard_of
from redlease.sidecar.config import ElectionConfig
from redlease.sidecar.leasetable import Entry, Leases, Retired
from redlease.sidecar.lockanswers import (
    MAX_WAIT_MS,
    AcquireRequest,
    ApiError,
    check_name,
    granted,
    held,
    lost,
    parse_acquire,
    parse_extend,
    parse_release,
    switching,
    too_many_waits,
    unavailable,
)
from redlease.sidecar.lockhttp import answering, read_capped, unless
from redlease.sidecar.locktarget import CLOSE_TIMEOUT, ApiTarget, Connection, lock_waits, pool_size

log = structlog.get_logger("redlease.sidecar")

# seconds a name's fence counter and history outlive its last lease (Lock forget_after): Redis
# keys per API name are bounded in time, tokens still increase (docs/lockapi.md, "Redis keys")
FORGET_AFTER = 60.0
READ_TIMEOUT = 2.0  # seconds GET /locks/{name} waits for the nodes' answers
WAITS = "lock-acquire"  # the kind of parked request a blocking acquire is (ConnectionGuard.park)


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
            app.router.add_post(f"/locks/{{name:.+}}/{verb}", answering(handler))
        app.router.add_get("/locks/{name:.+}", answering(self._show))

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
            lease = await self._attempt(name, unless(gone, lock.acquire(timeout=wait)))
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


async def _quiet_release(entry: Entry) -> None:
    """Release at shutdown: a lease already lost, or Redis gone, is no error here."""
    with contextlib.suppress(LockError):
        await entry.lock.release()


async def _retire(entry: Entry) -> None:
    """Release a lease of a replaced target once its extend or release under way is done."""
    async with entry.busy:
        await _quiet_release(entry)


__all__ = ["FORGET_AFTER", "LockApi"]
