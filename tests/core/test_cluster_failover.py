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
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from redlease import Lock, LockUnavailable, MultiLock, aio
from redlease.core.keys import LockKeys
from redlease.devtools.localredis import LocalCluster, RedisServer

T = TypeVar("T")
RECOVERY = 60.0  # seconds from the kill until the same client works again: a generous bound
_names = itertools.count()


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    """A fresh 3+3 cluster per test (the test kills one of its masters)."""
    with LocalCluster(replicas=1, node_timeout_ms=1000) as c:
        yield c


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
    cluster: LocalCluster,
) -> None:
    name = f"svc{next(_names)}"
    names = names_on_every_master(cluster, name)
    client = cluster.client()
    try:
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
        multi.extend()  # a lease on masters that did not fail is untouched
        multi.release()
        assert held.fencing_token > 0
        later = retry(lambda: across.acquire(blocking=False), errors)
        assert later.fencing_token > again.fencing_token
        across.release()
        assert all(isinstance(e, LockUnavailable) for e in errors)
    finally:
        client.close()


@pytest.mark.slow
async def test_asyncio_clients_survive_a_master_sigkill_and_automatic_failover(
    cluster: LocalCluster,
) -> None:
    name = f"asvc{next(_names)}"
    names = names_on_every_master(cluster, name)
    host, port = cluster.startup_nodes[0]
    client: Any = AsyncRedisCluster(host=host, port=port)
    try:
        lock = aio.Lock(client, name, ttl=60)
        across = aio.MultiLock(client, names, ttl=60)
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
    finally:
        await client.aclose()


async def test_clients_follow_a_takeover_of_a_killed_master(cluster: LocalCluster) -> None:
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
    client = cluster.client()
    host, port = cluster.startup_nodes[0]
    aclient: Any = AsyncRedisCluster(host=host, port=port)
    try:
        lock = Lock(client, name, ttl=60)
        alock = aio.Lock(aclient, other, ttl=60)
        lease = lock.acquire()
        alease = await alock.acquire()
        replica = cluster.replica_of(old)
        cluster.wait_synced(old)
        old.kill()
        cluster.takeover(replica)
        assert cluster.wait_promoted(lease_key(name), old) is replica

        assert lock.extend().fencing_token == lease.fencing_token
        assert (await alock.extend()).fencing_token == alease.fencing_token
        lock.release()
        await alock.release()
        assert lock.acquire(blocking=False).fencing_token > lease.fencing_token
        assert (await alock.acquire(blocking=False)).fencing_token > alease.fencing_token
        lock.release()
        await alock.release()
    finally:
        client.close()
        await aclient.aclose()
