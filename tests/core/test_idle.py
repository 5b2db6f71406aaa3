"""Connections kept between requests (core/idle.py): never stale, never shared by a fork, never
more than KEEP per pool; the pools that decide on return keep their own checkout."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core import idle, scripts
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until, wait_until


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of this test alone: it is restarted."""
    with RedisServer() as server:
        yield server


def _kept(pool: object) -> list[object]:
    state = pool.__dict__.get("_redlease_idle")
    return [] if state is None else list(state[1])


def test_a_restarted_server_does_not_fail_the_next_request(own_server: RedisServer) -> None:
    client = own_server.client()
    lock = redlease.Lock(client, "idle-restart", ttl=5)
    before = lock.acquire()
    lock.release()
    assert len(_kept(client.connection_pool)) == 1
    own_server.restart()
    lease = lock.acquire()  # the kept connection's peer is gone: through the pool, reconnected
    assert lease.fencing_token > before.fencing_token  # a new, empty server: clock-seeded
    lock.release()
    client.close()


def test_kept_connections_are_bounded_and_closed_by_the_pool(own_server: RedisServer) -> None:
    client = own_server.client()
    pool = client.connection_pool
    n = idle.KEEP + 3
    taken = [idle.take(pool) for _ in range(n)]
    for conn in taken:
        conn.send_command("PING")
        assert conn.read_response() in (b"PONG", "PONG")
        idle.give(pool, conn)
    assert len(_kept(pool)) == idle.KEEP
    assert len(pool._available_connections) == n - idle.KEEP
    client.close()  # disconnects in-use connections too: the kept ones
    lock = redlease.Lock(client, "idle-closed", ttl=5)
    lock.acquire()
    lock.release()


def _child(port: int, name: str, rounds: int, out: mp.Queue[int]) -> None:
    client = redis.Redis(host="127.0.0.1", port=port)
    lock = redlease.Lock(client, name, ttl=5)
    for _ in range(rounds):
        lock.acquire()
        lock.release()
    out.put(os.getpid())


def test_a_forked_child_does_not_use_the_parents_connection(own_server: RedisServer) -> None:
    """Shared across fork, one socket would carry both processes' replies, mixed up."""
    client = own_server.client()
    lock = redlease.Lock(client, "idle-parent", ttl=5)
    lock.acquire()
    lock.release()
    parent_conn = _kept(client.connection_pool)[0]
    ctx = mp.get_context("fork")
    out: mp.Queue[int] = ctx.Queue()

    def child_uses_inherited_client() -> None:
        assert idle.take(client.connection_pool) is not parent_conn
        _child(own_server.port, "idle-child", 300, out)
        child_lock = redlease.Lock(client, "idle-child-inherited", ttl=5)
        for _ in range(300):
            child_lock.acquire()
            child_lock.release()

    proc = ctx.Process(target=child_uses_inherited_client)
    proc.start()
    for _ in range(300):
        lock.acquire()
        lock.release()
    proc.join(60)
    assert proc.exitcode == 0
    assert out.get(timeout=5) != os.getpid()
    client.close()


def test_a_bounded_pool_keeps_its_own_checkout(own_server: RedisServer) -> None:
    """A blocking pool of 2: a kept connection would leave one for everybody else."""
    pool = redis.BlockingConnectionPool(host="127.0.0.1", port=own_server.port, max_connections=2)
    client = redis.Redis(connection_pool=pool)
    lock = redlease.Lock(client, "idle-bounded", ttl=5)
    lock.acquire()
    lock.release()
    assert "_redlease_idle" not in pool.__dict__
    a, b = pool.get_connection(), pool.get_connection()  # both are free again
    pool.release(a)
    pool.release(b)
    client.close()


async def test_asyncio_restart_and_bound(own_server: RedisServer) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=own_server.port)
    lock = aio.Lock(client, "idle-aio", ttl=5)
    before = await lock.acquire()
    await lock.release()
    (kept,) = _kept(client.connection_pool)
    own_server.restart()  # without its data: the fence counter is gone
    # the event loop learns of the closed peer when it runs; then the kept connection is
    # passed over (the pool's own check sees no more than this)
    await async_wait_until(lambda: _closed_seen(kept))
    lease = await lock.acquire()
    assert lease.fencing_token > before.fencing_token  # seeded from the server clock
    await lock.release()
    pool = client.connection_pool
    taken = [await idle.atake(pool) for _ in range(idle.KEEP + 2)]
    for conn in taken:
        await idle.agive(pool, conn)
    assert len(_kept(pool)) == idle.KEEP
    await client.aclose()


async def test_asyncio_kept_connection_is_taken_without_awaiting_only_while_clean(
    own_server: RedisServer,
) -> None:
    """The uncontended request's checkout (idle.aready) takes the kept connection at once, and
    passes over one whose peer closed before the event loop saw it (a server restarted in
    between, with no await): the socket itself says so, the request goes through anyway."""
    client = aioredis.Redis(host="127.0.0.1", port=own_server.port)
    lock = aio.Lock(client, "idle-ready", ttl=5)
    await lock.acquire()
    await lock.release()
    pool = client.connection_pool
    (kept,) = _kept(pool)
    assert idle.aready(pool) is kept
    await idle.agive(pool, kept)
    own_server.restart()  # no await since: the event loop has not seen the close
    assert idle.aready(pool) is None
    assert _kept(pool) == [kept]  # left to atake, which closes it
    await lock.acquire()
    await lock.release()
    assert kept not in _kept(pool)
    await client.aclose()


async def _closed_seen(conn: Any) -> bool:
    """The event loop saw the peer close ``conn``: redis-py 8.0-8.1's ``can_read`` says True,
    8.2's raises ConnectionError ("Connection closed by server")."""
    check = getattr(conn, "can_read", None) or conn.can_read_destructive  # before redis-py 8
    try:
        return bool(await check())
    except (redis.exceptions.ConnectionError, OSError):
        return True


def _monitor_lines(server: RedisServer, action: Any) -> list[str]:
    """The MONITOR lines (``ts [db addr] "CMD" ...``) logged while ``action()`` runs."""
    with server.client().monitor() as mon:
        action()
        marker = server.client()
        marker.echo("end-of-action")
        lines = []
        while True:
            line = mon.next_command()
            lines.append(f"[{line['client_address']}:{line['client_port']}] {line['command']}")
            if "end-of-action" in line["command"]:
                return lines


def _wait_after_write_on_same_connection(lines: list[str]) -> None:
    acquire = (scripts.ACQUIRE.function, scripts.ACQUIRE.sha)  # FCALL, or EVALSHA on 6.2
    writes = [ln for ln in lines if not ln.startswith("[lua") and any(a in ln for a in acquire)]
    waits = [ln for ln in lines if ln.split("] ", 1)[1].startswith("WAIT")]
    assert writes and waits, lines
    assert writes[-1].split("]")[0] == waits[-1].split("]")[0], (writes[-1], waits[-1])


def test_wait_runs_on_the_connection_of_the_write(own_server: RedisServer) -> None:
    """WAIT counts the replicas that have its own connection's last write: on any other
    connection it would count replicas that never saw the grant."""
    replica = RedisServer(extra_args=["--replicaof", "127.0.0.1", str(own_server.port)]).start()
    try:
        rclient = replica.client()
        wait_until(lambda: rclient.info("replication").get("master_link_status") == "up")
        client = own_server.client()
        lock = redlease.Lock(client, "idle-wait", ttl=10, replicas=1, replica_timeout=2)
        other = redlease.Lock(client, "idle-wait-other", ttl=10)
        other.acquire()  # a second connection in play
        other.release()

        def sync_round() -> None:
            lock.acquire()
            lock.release()

        _wait_after_write_on_same_connection(_monitor_lines(own_server, sync_round))

        async def async_round() -> None:
            aclient = aioredis.Redis(host="127.0.0.1", port=own_server.port)
            alock = aio.Lock(aclient, "idle-wait-aio", ttl=10, replicas=1, replica_timeout=2)
            await aio.Lock(aclient, "idle-wait-aio-other", ttl=10).acquire()
            await alock.acquire()
            await alock.release()
            await aclient.aclose()

        _wait_after_write_on_same_connection(
            _monitor_lines(own_server, lambda: asyncio.run(async_round()))
        )
        client.close()
    finally:
        replica.stop()
