"""A Redis Cluster master fails over (3 masters + 3 replicas): the clients that existed before
carry on without being recreated — sync and asyncio, one lock and a lock over several slots.

The master serving the lock's slot is SIGKILLed. Until its replica is promoted every operation
fails as an outage (:class:`LockUnavailable`, retryable); after it, the same client objects
reach the new master (the slot map is refreshed on the connection errors), the lease that was
replicated before the kill is still held and the fencing token keeps growing.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from redlease import Lock, LockUnavailable, MultiLock, aio
from redlease.core import client as drivers
from redlease.core.keys import LockKeys
from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until

T = TypeVar("T")
RECOVERY = 60.0  # seconds from the kill until the same client works again: a generous bound
_names = itertools.count()


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A fresh 3+3 cluster per test (the test kills one of its masters)."""
    with LocalCluster(replicas=1, node_timeout_ms=1000) as c:
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Any]:
    """A blocking cluster client, made before the failover and kept through it."""
    c = cluster.client()
    yield c
    c.close()


@pytest.fixture
async def aclient(cluster: LocalCluster) -> AsyncIterator[Any]:
    """An asyncio cluster client, made before the failover and kept through it."""
    host, port = cluster.startup_nodes[0]
    c: Any = AsyncRedisCluster(host=host, port=port)
    yield c
    await c.aclose()


def lease_key(name: str) -> str:
    return LockKeys.for_name(name).lease


def names_on_every_master(cluster: LocalCluster, first: str) -> list[str]:
    """``first`` and one more lock name served by each other master (a lease across slots)."""
    served = {cluster.master_of(lease_key(first)).port: first}
    for i in itertools.count():
        name = f"{first}-{i}"
        served.setdefault(cluster.master_of(lease_key(name)).port, name)
        if len(served) == len(cluster.servers):
            return list(served.values())
    raise AssertionError("unreachable")


def kill_master(cluster: LocalCluster, name: str) -> RedisServer:
    """SIGKILL the master serving lock ``name`` once its replica has all it wrote."""
    master = cluster.master_of(lease_key(name))
    cluster.wait_synced(master)
    master.kill()
    return master


def retry(op: Callable[[], T], errors: list[LockUnavailable], timeout: float = RECOVERY) -> T:
    """``op()`` once it succeeds, within ``timeout``; every failure must be an outage."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return op()
        except LockUnavailable as exc:
            errors.append(exc)
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


async def aretry(
    op: Callable[[], Awaitable[T]], errors: list[LockUnavailable], timeout: float = RECOVERY
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await op()
        except LockUnavailable as exc:
            errors.append(exc)
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)


@pytest.mark.slow
def test_sync_clients_survive_a_master_sigkill_and_automatic_failover(
    cluster: LocalCluster, client: Any
) -> None:
    name = f"svc{next(_names)}"
    names = names_on_every_master(cluster, name)
    lock = Lock(client, name, ttl=60)
    multi = MultiLock(client, names[1:], ttl=60)  # on the other masters
    across = MultiLock(client, names, ttl=60)  # on every master, the killed one included
    token = across.acquire(blocking=False).fencing_token
    across.release()
    lease = lock.acquire(blocking=False)
    held = multi.acquire(blocking=False)
    old = kill_master(cluster, name)

    errors: list[LockUnavailable] = []
    extended = retry(lambda: lock.extend(), errors)
    assert extended.fencing_token == lease.fencing_token  # the replicated lease survived
    new = cluster.wait_promoted(lease_key(name), old)
    assert new.port != old.port and new in cluster.replica_servers
    assert cluster.master_of(lease_key(name)) is new
    assert errors, "the first operations after the kill fail as outages"

    lock.release()
    again = retry(lambda: lock.acquire(blocking=False), errors)
    assert again.fencing_token > token  # the fence counter survived and keeps growing
    lock.release()
    # a lease on the masters that did not fail is untouched (the same client object)
    assert retry(lambda: multi.extend(), errors).fencing_token == held.fencing_token
    multi.release()
    later = retry(lambda: across.acquire(blocking=False), errors)
    assert later.fencing_token > again.fencing_token
    across.release()


@pytest.mark.slow
async def test_asyncio_clients_survive_a_master_sigkill_and_automatic_failover(
    cluster: LocalCluster, aclient: Any
) -> None:
    name = f"asvc{next(_names)}"
    lock = aio.Lock(aclient, name, ttl=60)
    across = aio.MultiLock(aclient, names_on_every_master(cluster, name), ttl=60)
    lease = await lock.acquire()
    old = kill_master(cluster, name)

    errors: list[LockUnavailable] = []
    extended = await aretry(lambda: lock.extend(), errors)
    assert extended.fencing_token == lease.fencing_token
    await asyncio.to_thread(cluster.wait_promoted, lease_key(name), old)
    assert errors

    await lock.release()
    again = await aretry(lambda: lock.acquire(blocking=False), errors)
    assert again.fencing_token > lease.fencing_token
    await lock.release()
    later = await aretry(lambda: across.acquire(blocking=False), errors)
    assert later.fencing_token > again.fencing_token
    await across.release()


def take_over(cluster: LocalCluster, old: RedisServer, name: str, *, kill: bool) -> None:
    """Promote the replica of ``old`` (serving lock ``name``) at once, with ``CLUSTER FAILOVER
    TAKEOVER``, once it has all ``old`` wrote; SIGKILL ``old`` first if ``kill``. Returns when
    every live node names the replica."""
    replica = cluster.replica_of(old)
    cluster.wait_synced(old)
    if kill:
        old.kill()
    cluster.takeover(replica)
    assert cluster.wait_promoted(lease_key(name), old) is replica


async def test_clients_follow_a_takeover_of_a_killed_master(
    cluster: LocalCluster, client: Any, aclient: Any
) -> None:
    """The quick variant: the master is SIGKILLed and its replica promoted at once with
    ``CLUSTER FAILOVER TAKEOVER`` (no wait for the failure detection). The first request of
    each client after the promotion finds the dead node, the client refreshes its slot map and
    sends the request to the new master at once: nothing of it was written (the connection was
    refused), so it cannot run twice. No outage error is seen."""
    name = f"tk{next(_names)}"
    old = cluster.master_of(lease_key(name))
    other = next(
        n for i in itertools.count() if cluster.master_of(lease_key(n := f"{name}-{i}")) is old
    )
    lock = Lock(client, name, ttl=60)
    alock = aio.Lock(aclient, other, ttl=60)
    lease = lock.acquire()
    alease = await alock.acquire()
    take_over(cluster, old, name, kill=True)

    assert lock.extend().fencing_token == lease.fencing_token
    assert (await alock.extend()).fencing_token == alease.fencing_token
    lock.release()
    await alock.release()
    assert lock.acquire(blocking=False).fencing_token > lease.fencing_token
    assert (await alock.acquire(blocking=False)).fencing_token > alease.fencing_token
    lock.release()
    await alock.release()


async def test_clients_follow_moved_after_a_takeover_of_a_live_master(
    cluster: LocalCluster, client: Any, aclient: Any
) -> None:
    """The old master stays up and becomes its replica's replica: it answers ``MOVED``, which
    did not run the request, so the clients refresh their slot map and send it to the new
    master at once (no error seen)."""
    name = f"mv{next(_names)}"
    old = cluster.master_of(lease_key(name))
    lock = Lock(client, name, ttl=60)
    alock = aio.Lock(aclient, name, ttl=60)
    lease = lock.acquire()
    assert (await alock.state()).fencing_token == lease.fencing_token  # its map: the old
    take_over(cluster, old, name, kill=False)
    assert old.alive

    assert lock.extend().fencing_token == lease.fencing_token
    assert (await alock.state()).fencing_token == lease.fencing_token
    lock.release()
    assert (await alock.acquire(blocking=False)).fencing_token > lease.fencing_token
    await alock.release()


@pytest.mark.parametrize(
    ("error", "refresh", "resend"),
    [
        (drivers.Unsent("Error 111 connecting"), True, True),  # nothing written: go elsewhere
        (rex.MovedError("3999 127.0.0.1:7001"), True, True),  # refused by the node: did not run
        (rex.ConnectionError("Connection closed by server."), True, False),  # may have run
        (rex.TimeoutError("no reply"), True, False),  # may still run
        (rex.ClusterDownError("CLUSTERDOWN The cluster is down"), True, False),
        (rex.AuthenticationError("invalid password"), False, False),
        (rex.MaxConnectionsError("Too many connections"), False, False),  # a client-side limit
        (rex.ResponseError("WRONGTYPE"), False, False),
    ],
)
def test_which_errors_refresh_the_slot_map_and_which_requests_go_again(
    error: Exception, refresh: bool, resend: bool
) -> None:
    assert drivers.stale_map(error) is refresh
    assert drivers.resendable(error) is resend
    if refresh:  # a failover error is an outage: retryable
        assert isinstance(drivers.translate(error, "x", "n"), LockUnavailable)


def test_a_refused_connection_is_unsent_and_other_errors_stay_what_they_are() -> None:
    refused = rex.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")
    out = drivers.unsent(refused)
    assert isinstance(out, drivers.Unsent) and out.__cause__ is refused
    assert str(out) == str(refused)
    limit = rex.MaxConnectionsError("Too many connections")
    assert drivers.unsent(limit) is limit


def _blocked_on(server: RedisServer) -> int:
    """Connections blocked in a BLPOP on ``server`` now (flag ``b``)."""
    with server.client() as observer:
        return sum(1 for c in observer.client_list() if "b" in c.get("flags", ""))


async def test_a_client_reset_by_moved_replies_cuts_no_request_to_a_healthy_master(
    cluster: LocalCluster,
) -> None:
    """redis-py's asyncio RedisCluster (before 8.2) closes every connection of every node on every
    ``reinitialize_steps``-th ``MOVED`` (5 by default, counted over the client's life, the
    user's own commands included; the test starts the count at 4, as if it had seen 4 already:
    how many MOVEDs a failover yields depends on redis-py's slot patching) and on
    ``CLUSTERDOWN``. After a takeover, the user's own command on the
    same client gets MOVED while waiters of a lock on another master are blocked in the
    listener's BLPOP and its holder extends: their requests are not cut (before the fix: the
    waiters failed with LockUnavailable "Connection closed by server")."""
    host, port = cluster.startup_nodes[0]
    aclient: Any = AsyncRedisCluster(host=host, port=port)
    aclient.reinitialize_counter = aclient.reinitialize_steps - 1
    closes: list[bool] = []
    close = aclient.aclose

    async def counted() -> None:  # this client's own resets, counted
        closes.append(True)
        await close()

    aclient.aclose = counted
    name = f"rs{next(_names)}"
    old = cluster.master_of(lease_key(name))
    healthy = next(
        n for i in itertools.count() if cluster.master_of(lease_key(n := f"{name}-{i}")) is not old
    )
    served = cluster.master_of(lease_key(healthy))
    key = next(k for i in itertools.count() if cluster.master_of(k := f"u{i}") is old)
    holder = aio.Lock(aclient, healthy, ttl=60)
    lease = await holder.acquire(blocking=False)

    async def waiter() -> Any:
        return await aio.Lock(aclient, healthy, ttl=60).acquire(timeout=RECOVERY)

    waiters = [asyncio.create_task(waiter()) for _ in range(3)]
    try:
        await async_wait_until(lambda: asyncio.to_thread(lambda: _blocked_on(served) >= 1))
        take_over(cluster, old, name, kill=False)

        await aclient.get(key)  # MOVED, the fifth: redis-py < 8.2 closes its connections
        if not closes:  # redis-py 8.2 only patches the slot: reset as earlier releases (and
            await aclient.aclose()  # users on them) do, on a MOVED or a CLUSTERDOWN
        assert closes, "the client closed its connections"
        assert not [w for w in waiters if w.done()], [w.exception() for w in waiters if w.done()]
        assert (await holder.extend()).fencing_token == lease.fencing_token

        await holder.release()
        first = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        winner = first[0].pop()
        assert winner.result().fencing_token > lease.fencing_token  # woken through the BLPOP
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await close()
