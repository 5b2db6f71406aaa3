"""Where a Sentinel-managed pool's master is, asked within a request's deadline.

redis-py asks the Sentinels for the master whenever a Sentinel pool makes a connection: each
Sentinel in turn, with its own client's settings (5 s socket timeouts, retries with back-off).
With the Sentinels paused, ``acquire(timeout=1)`` on a new connection took 30 s. Here each
Sentinel is asked ``SENTINEL MASTERS`` on a connection of its own client's pool made and read
within its share of the time left (that time over the Sentinels still to ask: one that hangs
does not eat the others' turn), and redis-py's own lookup (``discover_master``: which answer
counts, the master's state checked, the error naming every Sentinel) decides over those
answers. The Sentinel that answered is asked first next time, as redis-py does, and the pool
learns the address as its own lookup would have told it (its idle connections to a former
master closed).
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from redlease.core import dial, redispy
from redlease.core.dial import Address
from redlease.core.timing import MIN_WAIT


def managed(pool: Any) -> bool:
    """Whether ``pool`` is a Sentinel-managed pool of a master (``Sentinel.master_for``)."""
    return bool(getattr(pool, "is_master", False)) and hasattr(pool, "sentinel_manager")


def current(pool: Any, conn: Any) -> bool:
    """Whether ``conn`` leads to the master ``pool`` knows now (always, for a pool that is not
    :func:`managed`): redis-py's rule for a Sentinel pool's connection given back (the asyncio
    pool's own ``owns_connection`` fails in redis-py 8.2), so a failover's new master leaves
    the connections to the old one unused."""
    if not managed(pool):
        return True
    return bool(getattr(pool, "proxy", pool).master_address == (conn.host, conn.port))


class _Asked:
    """One Sentinel as ``discover_master`` asks it, answering within its share of the time
    left: ``end`` is the lookup's deadline, ``turns`` how many Sentinels are still to be
    asked, this one included."""

    def __init__(self, client: Any, end: float, turns: int) -> None:
        self.client = client
        self.end = end
        self.turns = turns

    def wait(self) -> float:
        return max(MIN_WAIT, (self.end - time.monotonic()) / self.turns)

    def __repr__(self) -> str:  # how discover_master names it in its error
        return repr(self.client)

    def sentinel_masters(self) -> Any:
        wait = self.wait()
        conn = dial.connect(self.client.connection_pool, wait)
        try:
            conn.send_command("SENTINEL MASTERS", check_health=False)
            if not conn.can_read(timeout=wait):
                raise redispy.no_reply(wait)
            return self.client.parse_response(conn, "SENTINEL MASTERS")
        finally:
            conn.disconnect()


class _AsyncAsked(_Asked):
    async def sentinel_masters(self) -> Any:
        wait = self.wait()
        try:
            async with asyncio.timeout(wait):
                conn = await dial.aconnect(self.client.connection_pool, wait)
        except TimeoutError:
            raise redispy.no_reply(wait) from None
        try:
            await conn.send_command("SENTINEL MASTERS", check_health=False)
            async with asyncio.timeout(wait):
                return await self.client.parse_response(conn, "SENTINEL MASTERS")
        except TimeoutError:
            raise redispy.no_reply(wait) from None
        finally:
            await conn.disconnect()


def _asking(pool: Any, timeout: float, kind: type[_Asked]) -> Any:
    """A copy of ``pool``'s Sentinel manager whose Sentinels answer within ``timeout`` in all."""
    manager = pool.sentinel_manager
    end = time.monotonic() + timeout
    asked = copy.copy(manager)
    sentinels = list(manager.sentinels)
    asked.sentinels = [kind(s, end, len(sentinels) - i) for i, s in enumerate(sentinels)]
    return asked


def _learnt(pool: Any, asked: Any, address: Address) -> bool:
    """Put the Sentinel that answered first in ``pool``'s manager; whether ``address`` is a
    new master for ``pool`` (now noted as its master)."""
    sentinels = pool.sentinel_manager.sentinels
    first = asked.sentinels[0].client
    i = next((i for i, s in enumerate(sentinels) if s is first), 0)
    sentinels[0], sentinels[i] = sentinels[i], sentinels[0]
    holder = getattr(pool, "proxy", pool)  # redis-py's blocking pool keeps it in a proxy
    if holder.master_address == address:
        return False
    holder.master_address = address
    return True


def master(pool: Any, timeout: float) -> Address:
    """``pool.get_master_address()`` (a :func:`managed` pool) with the Sentinels asked within
    ``timeout`` seconds in all; raises redis-py's ``MasterNotFoundError`` as it would."""
    asked = _asking(pool, timeout, _Asked)
    address: Address = asked.discover_master(pool.service_name)
    if _learnt(pool, asked, address):
        pool.disconnect(inuse_connections=False)
    return address


async def amaster(pool: Any, timeout: float) -> Address:
    """:func:`master` for a ``redis.asyncio`` Sentinel pool."""
    asked = _asking(pool, timeout, _AsyncAsked)
    address: Address = await asked.discover_master(pool.service_name)
    if _learnt(pool, asked, address):
        await pool.disconnect(inuse_connections=False)
    return address
