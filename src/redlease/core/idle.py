"""A few connections kept between requests, taken from a plain redis-py ``ConnectionPool``.

redis-py 8's checkout and return (a lock, observability counters, an event dispatch, a
readiness poll) cost about 10 us per request with the blocking client and 17 us with asyncio,
measured on the 2-core machine of ``make bench``: 7-9 % of an uncontended acquire+release pair
and part of every hand-off. A connection kept here stays checked out of its pool; taking it
back costs one readiness check, the same check the pool makes: a connection with unread bytes or
a closed peer (a restarted server) goes back through the pool, which reconnects it.

Only plain pools (the default of ``redis.Redis``, a cluster node's pool) and the pools of a
Sentinel-managed master (``Sentinel.master_for``), whose connections are kept only while they
lead to the master the pool knows (:func:`redlease.core.masters.current`: a failover's new
master leaves the old one's connections unused); a blocking pool is bounded, so it keeps its
own checkout. At most :data:`KEEP` connections per pool and process (the state of a forked
child starts empty). The pool's ``disconnect()`` reaches those it lent; those made for a
bounded request (:mod:`redlease.core.dial`) it does not know: they are closed when passed
over, dropped (:func:`drop`) or garbage-collected.
"""

from __future__ import annotations

import select
import time
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

from redlease.core import dial, homes, masters, redispy
from redlease.core.timing import MIN_WAIT

# connections kept per pool: a request per slot of the gate (redlease.core.gate) and a
# waiters' BLPOP, so that those made here (:mod:`redlease.core.dial`) are made once, not per request
KEEP = 5
_ATTR = "_redlease_idle"


_KEPT = (redis.ConnectionPool, redis.sentinel.SentinelConnectionPool)
_AKEPT = (redis.asyncio.ConnectionPool, redis.asyncio.sentinel.SentinelConnectionPool)


def _kept(pool: Any, kinds: tuple[type, ...]) -> list[Any] | None:
    """The kept connections of ``pool`` in this process (None: not a pool of ``kinds``)."""
    if type(pool) not in kinds:
        return None
    state = pool.__dict__.get(_ATTR)
    forks = homes.FORKS
    if state is None or state[0] != forks:
        state = (forks, [])
        pool.__dict__[_ATTR] = state
    kept: list[Any] = state[1]
    return kept


def _clean(conn: Any) -> bool:
    """Connected, nothing unread and the peer still there (a zero-timeout poll)."""
    sock = getattr(conn, redispy.SOCK, None)
    return sock is not None and _quiet(sock)


def _quiet(sock: Any) -> bool:
    """Nothing to read on ``sock``: no stray reply and no end of stream from a peer that closed
    (or died) since the last request."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


def take(pool: Any, timeout: float | None = None) -> Any:
    """A connection for one request: a kept one if it is clean, else the pool's checkout.

    With ``timeout``, a plain pool's new connection is made by :mod:`redlease.core.dial`, not
    by the pool: connected and greeted within ``timeout``, in one attempt. redis-py's pool
    connects with the client's retries (redis-py 8: 10, with back-off) and socket timeouts
    (5 s): 53 s for one acquire against a paused server."""
    kept = _kept(pool, _KEPT)
    while kept:
        try:
            conn = kept.pop()
        except IndexError:  # another thread took the last one
            break
        if _clean(conn) and (type(pool) is redis.ConnectionPool or masters.current(pool, conn)):
            return conn
        discard(pool, conn)
    if timeout is not None and kept is not None and not _limited(pool):
        return _connect(pool, timeout)
    return pool.get_connection()


def _limited(pool: Any) -> bool:
    """Whether ``pool`` was given a ``max_connections`` below redis-py's default: that limit is
    the caller's to keep (:class:`~redlease.errors.ConnectionLimit`), so the pool's checkout is
    used, and its connect is bounded by the client's own settings only."""
    limit = getattr(pool, "max_connections", None)
    return isinstance(limit, int) and limit < _DEFAULT_LIMIT


_DEFAULT_LIMIT: int = redis.ConnectionPool().max_connections  # 100 in redis-py 8.2


def _connect(pool: Any, timeout: float) -> Any:
    """A new connection for ``pool`` within ``timeout`` (:func:`redlease.core.dial.connect`),
    a Sentinel-managed pool's master looked up first within the same time."""
    end = time.monotonic() + timeout
    address = masters.master(pool, timeout) if masters.managed(pool) else None
    return dial.connect(pool, max(MIN_WAIT, end - time.monotonic()), address)


async def _aconnect(pool: Any, timeout: float) -> Any:
    """:func:`_connect` for a ``redis.asyncio`` pool."""
    end = time.monotonic() + timeout
    address = await masters.amaster(pool, timeout) if masters.managed(pool) else None
    return await dial.aconnect(pool, max(MIN_WAIT, end - time.monotonic()), address)


def discard(pool: Any, conn: Any) -> None:
    """Close ``conn`` (its reply was not read in full); the pool takes back one it lent."""
    conn.disconnect()
    if not dial.made_here(conn):
        pool.release(conn)


def drop(pool: Any) -> None:
    """Close the connections kept for ``pool`` (its node is gone: they lead nowhere)."""
    kept = _kept(pool, _KEPT)
    while kept:
        try:
            conn = kept.pop()
        except IndexError:
            break
        discard(pool, conn)


def give(pool: Any, conn: Any) -> None:
    """Return a connection after a request whose reply was read in full."""
    kept = _kept(pool, _KEPT)
    if (
        kept is not None
        and len(kept) < KEEP
        and getattr(conn, redispy.SOCK, None) is not None
        and (type(pool) is redis.ConnectionPool or masters.current(pool, conn))
    ):
        kept.append(conn)
    elif dial.made_here(conn):
        conn.disconnect()
    else:
        pool.release(conn)


def aready(pool: Any) -> Any | None:
    """The kept connection of an asyncio ``pool`` if it is clean now, taken without awaiting
    (the uncontended request: no coroutine, no deadline around its checkout); None: take one
    with :func:`atake` (none kept, or the newest needs a look that awaits or goes back)."""
    kept = _kept(pool, _AKEPT)
    if not kept:
        return None
    conn = kept[-1]
    if not conn.is_connected or redispy.aunread(conn) is not False:
        return None
    if type(pool) is not redis.asyncio.ConnectionPool and not masters.current(pool, conn):
        return None
    if not _aquiet(conn):
        return None
    kept.pop()
    return conn


async def atake(pool: Any, timeout: float | None = None) -> Any:
    """:func:`take` for a ``redis.asyncio`` pool."""
    kept = _kept(pool, _AKEPT)
    while kept:
        try:
            conn = kept.pop()
        except IndexError:
            break
        if await aclean(conn) and (
            type(pool) is redis.asyncio.ConnectionPool or masters.current(pool, conn)
        ):
            return conn
        await arelease(pool, conn, close=True)
    if timeout is not None and kept is not None and not _limited(pool):
        return await _aconnect(pool, timeout)
    return await pool.get_connection()


async def arelease(pool: Any, conn: Any, *, close: bool = False) -> None:
    """Give ``conn`` back: to ``pool`` if it lent it (closed first with ``close``), else
    closed (one made here)."""
    if close or dial.made_here(conn):
        await conn.disconnect()
    if not dial.made_here(conn):
        await pool.release(conn)


async def aclean(conn: Any) -> bool:
    """:func:`_clean` for a ``redis.asyncio`` connection: connected, nothing unread and the peer
    still there (a node that died since the last request has closed it)."""
    # can_read (redis-py 8) checks without reading; older versions only have the other
    check = getattr(conn, "can_read", None) or conn.can_read_destructive
    try:
        if not conn.is_connected or await check():
            return False
    except (redis.exceptions.ConnectionError, OSError):
        return False
    return _aquiet(conn)


def _aquiet(conn: Any) -> bool:
    """Nothing on an asyncio connection's socket: the event loop may not have seen the end of
    stream (or a stray byte) yet, so the socket itself is asked."""
    writer = getattr(conn, redispy.WRITER, None)
    sock = writer.transport.get_extra_info("socket") if writer is not None else None
    return sock is None or _quiet(sock)


async def agive(pool: Any, conn: Any) -> None:
    """:func:`give` for a ``redis.asyncio`` pool."""
    kept = _kept(pool, _AKEPT)
    if (
        kept is not None
        and len(kept) < KEEP
        and conn.is_connected
        and (type(pool) is redis.asyncio.ConnectionPool or masters.current(pool, conn))
    ):
        kept.append(conn)
    else:
        await arelease(pool, conn)
