"""The library against the habits of redis-py, python-redis-lock, Redisson and client-go users
(issue 35): explicit keyword parameters, one ConfigError naming the right keyword or class,
``locked()``, ``with lock:`` renewing the lease while its block runs, one default TTL."""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

import redlease
import redlease.aio
from redlease import ConfigError
from redlease.core.timing import DEFAULT_TTL
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import wait_until
from redlease.quorum import NodeSet

OPTIONS = ("ttl", "identity", "handoff", "replicas", "replica_timeout")

CONSTRUCTORS: list[tuple[Any, tuple[Any, ...]]] = [
    (redlease.Lock, ()),
    (redlease.ReentrantLock, ()),
    (redlease.Semaphore, (2,)),
    (redlease.ReadWriteLock, ()),
    (redlease.MultiLock, ()),
    (redlease.aio.Lock, ()),
    (redlease.aio.ReentrantLock, ()),
    (redlease.aio.Semaphore, (2,)),
    (redlease.aio.ReadWriteLock, ()),
    (redlease.aio.MultiLock, ()),
]


def _client(cls: Any, port: int = 1) -> Any:
    """A client of ``cls``'s flavour (no connection is made at construction)."""
    return (
        aioredis.Redis(port=port)
        if cls.__module__ == "redlease.core.aio"
        else redis.Redis(port=port)
    )


@pytest.mark.parametrize(
    ("cls", "extra"), CONSTRUCTORS, ids=lambda c: getattr(c, "__qualname__", "")
)
def test_signatures_show_the_options(cls: Any, extra: tuple[Any, ...]) -> None:
    params = inspect.signature(cls).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
    for option in OPTIONS:
        assert params[option].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["ttl"].default == DEFAULT_TTL == 15
    if extra:
        assert list(params)[:3] == ["client", "name", "limit"]


@pytest.mark.parametrize("cls", [redlease.Elector, redlease.aio.Elector])
def test_elector_signature_and_default_ttl(cls: Any) -> None:
    params = inspect.signature(cls).parameters
    assert params["ttl"].default == DEFAULT_TTL
    assert "on_started_leading" in params


@pytest.mark.parametrize(
    ("cls", "extra"), CONSTRUCTORS, ids=lambda c: getattr(c, "__qualname__", "")
)
def test_redis_py_timeout_keyword_names_ttl(cls: Any, extra: tuple[Any, ...]) -> None:
    name: Any = ["a", "b"] if "Multi" in cls.__name__ else "x"
    with pytest.raises(ConfigError) as err:
        cls(_client(cls), name, *extra, timeout=10)
    assert err.value.field == "timeout"
    assert "the TTL is `ttl=`; `timeout` is how long acquire waits" in str(err.value)


def test_misspelled_keyword_gets_a_suggestion() -> None:
    with pytest.raises(ConfigError) as err:
        redlease.Lock(redis.Redis(port=1), "x", tll=5)
    assert err.value.field == "tll" and "did you mean `ttl=`?" in str(err.value)
    with pytest.raises(ConfigError) as err:
        redlease.Semaphore(redis.Redis(port=1), "x", 2, identiy="me")
    assert "did you mean `identity=`?" in str(err.value)
    with pytest.raises(ConfigError) as err:
        redlease.aio.Elector(aioredis.Redis(port=1), "x", retry_perod=2)
    assert "did you mean `retry_period=`?" in str(err.value)
    with pytest.raises(ConfigError) as err:
        redlease.Lock(redis.Redis(port=1), "x", qwerty=1)
    assert "unknown keyword" in str(err.value) and "ttl=" in str(err.value)
    # a known keyword still works, and its bad value is named as before
    with pytest.raises(ConfigError) as err:
        redlease.Lock(redis.Redis(port=1), "x", ttl=-1)
    assert err.value.field == "ttl"


@pytest.mark.parametrize(
    ("cls", "client", "kind"),
    [
        (redlease.aio.Lock, lambda: redis.Redis(port=1), "blocking"),
        (redlease.aio.Semaphore, lambda: redis.Redis(port=1), "blocking"),
        (redlease.aio.ReadWriteLock, lambda: redis.Redis(port=1), "blocking"),
        (redlease.aio.Elector, lambda: redis.Redis(port=1), "blocking"),
        (redlease.Lock, lambda: aioredis.Redis(port=1), "asyncio"),
        (redlease.ReentrantLock, lambda: aioredis.Redis(port=1), "asyncio"),
        (redlease.Elector, lambda: aioredis.Redis(port=1), "asyncio"),
        (redlease.Lock, lambda: AsyncRedisCluster(host="127.0.0.1", port=1), "asyncio"),
        (redlease.Lock, lambda: NodeSet([aioredis.Redis(port=p) for p in (1, 2, 3)]), "asyncio"),
        (redlease.aio.Lock, lambda: NodeSet([redis.Redis(port=p) for p in (1, 2, 3)]), "blocking"),
    ],
)
def test_client_of_the_other_flavour_is_refused(cls: Any, client: Any, kind: str) -> None:
    given = client()
    extra = (2,) if cls.__name__ == "Semaphore" else ()
    with pytest.raises(ConfigError) as err:
        cls(given, "x", *extra)
    message = str(err.value)
    assert err.value.field == "client"
    assert (
        type(given).__name__ in message
        and f"is a{'n' if kind == 'asyncio' else ''} {kind} client" in message
    )
    public = "ReadWriteLock" if cls.__name__ == "ReadWriteLock" else cls.__name__
    if cls.__name__ == "AsyncElector":
        public = "Elector"
    right = f"redlease.{public}" if kind == "blocking" else f"redlease.aio.{public}"
    assert f"use {right} with it" in message


def test_sync_cluster_client_is_refused_by_the_asyncio_lock(redis_cluster: Any) -> None:
    client = redis_cluster.client()
    try:
        with pytest.raises(ConfigError, match="RedisCluster is a blocking client"):
            redlease.aio.Lock(client, "x")
    finally:
        client.close()


def test_locked_and_owned(redis_server: RedisServer) -> None:
    client = redis_server.client()
    a = redlease.Lock(client, "l", ttl=5)
    b = redlease.Lock(client, "l", ttl=5)
    assert not a.locked() and not a.owned()
    a.acquire()
    assert a.locked() and b.locked()
    assert a.owned() and not b.owned()
    a.release()
    assert not b.locked()
    s = redlease.Semaphore(client, "s", 2)
    s.acquire()
    assert redlease.Semaphore(client, "s", 2).locked()


async def test_locked_asyncio(redis_server: RedisServer) -> None:
    client = aioredis.Redis(port=redis_server.port)
    try:
        a = redlease.aio.Lock(client, "l", ttl=5)
        assert not await a.locked()
        await a.acquire()
        assert await redlease.aio.Lock(client, "l").locked() and a.owned()
        await a.release()
        assert not await a.locked()
    finally:
        await client.aclose()


def test_internals_are_private() -> None:
    public = {n for n in dir(redlease.Lock) if not n.startswith("_")}
    for internal in (
        "acquire_flow",
        "begin_acquire",
        "finish_acquire",
        "begin_release",
        "begin_extend",
        "forget",
        "executor",
        "state_flow",
    ):
        assert internal not in public
    assert {"acquire", "release", "extend", "hold", "locked", "owned", "state"} <= public


def test_with_block_longer_than_the_ttl_keeps_the_lease(redis_server: RedisServer) -> None:
    client = redis_server.client()
    lock = redlease.Lock(client, "w", ttl=1)
    with lock as lease:
        time.sleep(1.5)  # the body's own work, longer than the TTL
        assert lease.valid and lock.owned()
        assert lock.state().fencing_token == lease.fencing_token
    assert not lock.locked()  # released at exit, no NotOwned
    assert not [t for t in threading.enumerate() if t.name == "redlease-renew-w"]  # stopped


def test_with_block_whose_lease_is_taken_says_so(redis_server: RedisServer) -> None:
    """Never a silent expiry: a lease deleted under the block turns ``lease.valid`` false at
    the next renewal and the exit raises NotOwned."""
    client = redis_server.client()
    lock = redlease.Lock(client, "taken", ttl=1)
    with pytest.raises(redlease.NotOwned), lock as lease:  # noqa: PT012 - the block is tested
        client.delete(lock.keys.lease)
        wait_until(lambda: not lease.valid, timeout=15)
    assert not lock.owned()


def test_many_threads_with_blocks_exclude_each_other(redis_server: RedisServer) -> None:
    """Many callers, each with its own handle and renewer: one inside at a time, every block
    longer than the TTL, no NotOwned, no renewer left running."""
    inside: list[int] = []
    overlaps: list[int] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        client = redis_server.client()
        try:
            with redlease.Lock(client, "many", ttl=0.5, identity=f"w{i}"):
                inside.append(i)
                if len(inside) > 1:
                    overlaps.append(i)
                time.sleep(0.6)  # the body's own work, longer than the TTL
                inside.remove(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not overlaps and not inside
    assert not [t for t in threading.enumerate() if t.name == "redlease-renew-many"]


def test_reentrant_with_blocks_renew_until_the_outer_exit(redis_server: RedisServer) -> None:
    client = redis_server.client()
    lock = redlease.ReentrantLock(client, "r", ttl=1)
    with lock:
        with lock:
            time.sleep(0.8)
        time.sleep(0.8)  # the inner exit must not have stopped the renewal
        assert lock.owned() and lock.locked()
    assert not lock.locked()


async def test_async_with_block_longer_than_the_ttl_keeps_the_lease(
    redis_server: RedisServer,
) -> None:
    client = aioredis.Redis(port=redis_server.port)
    try:
        lock = redlease.aio.Lock(client, "w", ttl=1)
        async with lock as lease:
            await asyncio.sleep(1.5)  # the body's own work, longer than the TTL
            assert lease.valid and lock.owned()
        assert not await lock.locked()
    finally:
        await client.aclose()


async def test_async_with_block_ends_with_lease_lost(redis_server: RedisServer) -> None:
    """A lease taken away mid-block cancels the block, which exits with LeaseLost."""
    client = aioredis.Redis(port=redis_server.port)
    try:
        lock = redlease.aio.Lock(client, "gone", ttl=1)
        with pytest.raises(redlease.LeaseLost):
            async with lock:
                await client.delete(lock.keys.lease)  # the lease vanishes (an operator's DEL)
                await asyncio.sleep(30)  # cancelled at the next renewal (a third of the TTL)
    finally:
        await client.aclose()


TERM = {"ttl": 3.0, "renew_deadline": 2.0, "retry_period": 0.25}


async def test_async_elector_runs_work_per_term_and_cancels_it_on_loss(
    redis_server: RedisServer,
) -> None:
    """client-go's OnStartedLeading(ctx): the work of a term is cancelled when the term ends
    (the lease deleted under it, then stop()), before on_stopped_leading is told."""
    client = aioredis.Redis(port=redis_server.port)
    started: asyncio.Queue[Any] = asyncio.Queue()
    cancelled: asyncio.Queue[Any] = asyncio.Queue()
    stops: list[str] = []

    async def work(lease: Any) -> None:
        started.put_nowait(lease)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.put_nowait((lease, list(stops)))
            raise

    e = redlease.aio.Elector(client, "term", **TERM, on_stopped_leading=stops.append)
    runner = asyncio.create_task(e.run(work))
    try:
        first = await asyncio.wait_for(started.get(), 15)
        await client.delete(e.core.lock.keys.lease)  # the term is lost at its next renewal
        lease, stops_then = await asyncio.wait_for(cancelled.get(), 15)
        assert lease is first and stops_then == []  # cancelled before on_stopped_leading
        second = await asyncio.wait_for(started.get(), 15)  # leads again: new work
        assert second.fencing_token > first.fencing_token
        await e.stop()
        await asyncio.wait_for(runner, 15)
        assert (await asyncio.wait_for(cancelled.get(), 15))[0] is second
    finally:
        runner.cancel()
        await asyncio.wait([runner])
        await client.aclose()


def test_elector_runs_work_in_a_thread_told_when_the_term_ends(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client()
    terms: queue.Queue[Any] = queue.Queue()
    ended: queue.Queue[Any] = queue.Queue()

    def work(lease: Any, over: threading.Event) -> None:
        terms.put(lease)
        over.wait()  # the work goes on until its term ends
        ended.put(lease)

    e = redlease.Elector(client, "sterm", **TERM)
    thread = threading.Thread(target=e.run, args=(work,), daemon=True)
    thread.start()
    try:
        first = terms.get(timeout=15)
        client.delete(e.core.lock.keys.lease)
        assert ended.get(timeout=15) is first
        second = terms.get(timeout=15)
        assert second.fencing_token > first.fencing_token
    finally:
        e.stop()
        thread.join(15)  # run() returns once the term's work did
    assert not thread.is_alive() and ended.get_nowait() is second


async def test_async_with_leading_cancels_the_block_when_leadership_is_lost(
    redis_server: RedisServer,
) -> None:
    """``async with elector.leading()``: the block runs with the term's lease and is cancelled
    when the term ends (the lease deleted under it), before on_stopped_leading; the async with
    then raises LeaseLost, and the campaign is over (another candidate takes the lock)."""
    client = aioredis.Redis(port=redis_server.port)
    stops: list[str] = []
    inside: asyncio.Queue[Any] = asyncio.Queue()
    e = redlease.aio.Elector(client, "lead", **TERM, on_stopped_leading=stops.append)
    assert not e.leading and e.leading == False  # noqa: E712 - the flag it always was

    async def block() -> None:
        async with e.leading() as lease:
            inside.put_nowait((lease, bool(e.leading)))
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                inside.put_nowait(list(stops))
                raise

    runner = asyncio.create_task(block())
    try:
        lease, leading = await asyncio.wait_for(inside.get(), 15)
        assert leading and lease.fencing_token == e.lease.fencing_token
        await client.delete(e.core.lock.keys.lease)  # the term is lost at its next renewal
        assert await asyncio.wait_for(inside.get(), 15) == []  # before on_stopped_leading
        with pytest.raises(redlease.LeaseLost, match="leadership ended"):
            await asyncio.wait_for(runner, 15)
        assert not runner.cancelled() and not e.leading and len(stops) == 1
        other = redlease.aio.Lock(client, "lead", ttl=3)
        await other.acquire(blocking=False)  # nobody campaigns for it any more
        await other.release()
    finally:
        runner.cancel()
        await asyncio.wait([runner])
        await client.aclose()


async def test_async_with_leading_releases_on_a_normal_exit(redis_server: RedisServer) -> None:
    client = aioredis.Redis(port=redis_server.port)
    stops: list[str] = []
    e = redlease.aio.Elector(client, "calm", **TERM, on_stopped_leading=stops.append)
    try:
        async with e.leading() as lease:
            assert e.leading and (await e.core.lock.state()).holder == e.identity
        assert stops == [redlease.aio.Elector.STOPPED] and not e.leading
        state = await redlease.aio.Lock(client, "calm").state()
        assert state.holder is None and state.last_fence == lease.fencing_token  # released
        async with e.leading() as again:  # a second term in a row
            assert again.fencing_token > lease.fencing_token
    finally:
        await client.aclose()


@pytest.mark.parametrize("cls", [redlease.Elector, redlease.aio.Elector])
def test_elector_work_must_be_callable(cls: Any) -> None:
    client = _client(redlease.aio.Lock if cls is redlease.aio.Elector else redlease.Lock)
    with pytest.raises(ConfigError, match="work"):
        result = cls(client, "x").run(work=42)
        if inspect.iscoroutine(result):
            asyncio.run(result)
