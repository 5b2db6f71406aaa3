"""The quorum transport on real servers, through both drivers: one channel state machine.

Late replies are consumed in order, many threads or tasks share a channel, a failed connect
fails fast, a paused node costs one per-node timeout, and no thread or task is started per
request.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease.core.quorum import _async, _sync, channel
from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.netfault import DelayProxy
from redlease.quorum import NodeSet


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[DelayProxy]:
    p = DelayProxy(redis_server.port).start()
    yield p
    p.stop()


def far() -> float:
    return time.monotonic() + 10


# --- a reply that arrives after its caller gave up --------------------------------------------


def test_late_reply_is_consumed_in_order(redis_server: RedisServer) -> None:
    ch = _sync.Channel(redis_server.client(), "slow", dead_after=10)
    warm = ch.submit(("PING",))
    _sync.collect([(ch, warm)], far())
    redis_server.pause()  # SIGSTOP: the request waits in the socket
    try:
        first = ch.submit(("ECHO", "first"))
        _sync.collect([(ch, first)], time.monotonic() + 0.01)  # the caller gives up
        assert not first.done and ch.queued == 1
        second = ch.submit(("ECHO", "second"))
    finally:
        redis_server.resume()
    _sync.collect([(ch, second)], far())  # reads the late reply first, into its own slot
    assert (first.value, second.value) == (b"first", b"second")
    ch._close()


async def test_late_reply_is_consumed_in_order_asyncio(redis_server: RedisServer) -> None:
    client = aioredis.Redis(port=redis_server.port)
    ch = _async.Channel(client, "slow", dead_after=10)
    warm = ch.submit(("PING",))
    await _async.collect([(ch, warm)], far())
    redis_server.pause()
    try:
        first = ch.submit(("ECHO", "first"))
        await _async.collect([(ch, first)], time.monotonic() + 0.01)
        assert not first.done and ch.queued == 1
        second = ch.submit(("ECHO", "second"))
    finally:
        redis_server.resume()
    await _async.collect([(ch, second)], far())
    assert (first.value, second.value) == (b"first", b"second")
    await ch.close()
    await client.aclose()


# --- several callers on one channel ------------------------------------------------------------


def _caller_rounds(who: int, rng: random.Random) -> list[tuple[str, float]]:
    """What one caller sends: its own echo values, some with a deadline it cannot meet."""
    return [(f"{who}-{i}", 0.0005 if rng.random() < 0.3 else 10.0) for i in range(40)]


def test_threads_share_a_channel(proxy: DelayProxy) -> None:
    proxy.delay = 0.002
    ch = _sync.Channel(redis.Redis(port=proxy.port), "shared", dead_after=10)
    given_up: list[channel.Slot] = []
    wrong: list[str] = []

    def caller(who: int) -> None:
        for value, patience in _caller_rounds(who, random.Random(who)):
            slot = ch.submit(("ECHO", value))
            _sync.collect([(ch, slot)], time.monotonic() + patience)
            if not slot.done:
                given_up.append(slot)  # its reply must still land here, in order
            elif slot.value != value.encode():
                wrong.append(f"{value} got {slot.value!r}")

    threads = [threading.Thread(target=caller, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not wrong
    last = ch.submit(("PING",))
    _sync.collect(
        [(ch, last)], far()
    )  # reading up to this reply also fills every slot given up before it
    assert all(s.done and not isinstance(s.value, BaseException) for s in given_up)
    ch._close()


async def test_tasks_share_a_channel(proxy: DelayProxy) -> None:
    proxy.delay = 0.002
    client = aioredis.Redis(port=proxy.port)
    ch = _async.Channel(client, "shared", dead_after=10)
    given_up: list[tuple[channel.Slot, str]] = []

    async def caller(who: int) -> None:
        for value, patience in _caller_rounds(who, random.Random(who)):
            slot = ch.submit(("ECHO", value))
            await _async.collect([(ch, slot)], time.monotonic() + patience)
            if not slot.done:
                given_up.append((slot, value))
            else:
                assert slot.value == value.encode()

    await asyncio.gather(*(caller(w) for w in range(8)))
    last = ch.submit(("PING",))
    await _async.collect([(ch, last)], far())
    assert all(s.done and s.value == v.encode() for s, v in given_up)
    await ch.close()
    await client.aclose()


# --- this client's own queue on a node is not the node's delay ---------------------------------


def _queue_ahead(slow: channel.Channel) -> None:
    """Five requests of 0.2 s each ahead on ``slow``: a 1 s queue the node keeps answering
    (a BLPOP that times out holds up the requests behind it on its connection)."""
    for _ in range(5):
        slow.submit(("BLPOP", "redlease-test:nothing", "0.2"))


def test_queued_request_waits_while_its_node_answers(redis_nodes: list[RedisServer]) -> None:
    """Past the deadline a fan-out waits for a node still answering the requests queued before
    its own (patience 0.5 s > 0.2 s per reply) until ``needed`` replies are in, not longer."""
    chans = [_sync.Channel(s.client(), f"n{i}", dead_after=10) for i, s in enumerate(redis_nodes)]
    _sync.collect([(ch, ch.submit(("PING",))) for ch in chans], far())
    _queue_ahead(chans[2])
    slots = [ch.submit(("PING",)) for ch in chans]
    _sync.collect(list(zip(chans, slots, strict=True)), time.monotonic() + 0.05, 0.5, needed=2)
    assert slots[0].done and slots[1].done and not slots[2].done  # a quorum: not held up
    _queue_ahead(chans[2])
    slots = [ch.submit(("PING",)) for ch in chans]
    _sync.collect(list(zip(chans, slots, strict=True)), time.monotonic() + 0.05, 0.5, needed=3)
    assert all(s.done and s.value == b"PONG" for s in slots)  # queued, never counted late
    for ch in chans:
        ch._close()


async def test_queued_request_waits_while_its_node_answers_asyncio(
    redis_nodes: list[RedisServer],
) -> None:
    clients = [aioredis.Redis(port=s.port) for s in redis_nodes]
    chans = [_async.Channel(c, f"n{i}", dead_after=10) for i, c in enumerate(clients)]
    await _async.collect([(ch, ch.submit(("PING",))) for ch in chans], far())
    _queue_ahead(chans[2])
    slots = [ch.submit(("PING",)) for ch in chans]
    pairs = list(zip(chans, slots, strict=True))
    await _async.collect(pairs, time.monotonic() + 0.05, 0.5, needed=2)
    assert slots[0].done and slots[1].done and not slots[2].done
    _queue_ahead(chans[2])
    slots = [ch.submit(("PING",)) for ch in chans]
    await _async.collect(list(zip(chans, slots, strict=True)), time.monotonic() + 0.05, 0.5, 3)
    assert all(s.done and s.value == b"PONG" for s in slots)
    for ch in chans:
        await ch.close()
    for c in clients:
        await c.aclose()


def _reader_held(ch: _sync.Channel) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread that takes ``ch``'s reader role and, with its reply read, is kept from
    handing it out until the returned ``go`` is set (a thread starved of the GIL on a busy
    machine); ``holding`` is set once it is."""
    holding, go = threading.Event(), threading.Event()
    received = ch._received

    def held(conn: Any, value: Any) -> bool:
        if threading.current_thread() is reader and not go.is_set():
            holding.set()
            go.wait(30)
        return received(conn, value)

    ch._received = held  # type: ignore[method-assign]

    def read() -> None:
        _sync.collect([(ch, ch.submit(("PING",)))], far())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert holding.wait(10)
    return reader, holding, go


def test_a_reader_kept_from_running_does_not_make_its_node_late(
    redis_server: RedisServer,
) -> None:
    """The node answers at once, but the caller holding the reader role is kept from running
    far past the others' per-node timeout: their replies are late only by this process's own
    lag, so they wait for the reader instead of counting the node as silent. (Before: counted
    late after patience + LATE_GRACE with the reply already in the socket.)"""
    ch = _sync.Channel(redis_server.client(), "starved", dead_after=10)
    _sync.collect([(ch, ch.submit(("PING",)))], far())
    reader, _, go = _reader_held(ch)
    slot = ch.submit(("ECHO", "mine"))
    release = threading.Timer(1.0, go.set)  # 20x the patience below
    release.start()
    _sync.collect([(ch, slot)], time.monotonic() + 0.05, 0.05, needed=1)
    assert go.is_set() and slot.done and slot.value == b"mine"
    reader.join(10)
    ch._close()


def test_a_silent_node_is_late_while_another_caller_reads(redis_server: RedisServer) -> None:
    """A node that stops answering is late one per-node timeout after its last reply for a
    caller waiting on it, although another caller (with a far deadline) holds the reader role
    and goes on waiting: the reader's reads say how long the node has been silent."""
    ch = _sync.Channel(redis_server.client(), "paused", dead_after=30)
    _sync.collect([(ch, ch.submit(("PING",)))], far())
    redis_server.pause()
    try:
        reading = threading.Thread(
            target=lambda: _sync.collect([(ch, ch.submit(("PING",)))], far()), daemon=True
        )
        reading.start()
        until = time.monotonic() + 10
        while not ch._reading and time.monotonic() < until:  # it takes the reader role
            time.sleep(0.001)
        assert ch._reading
        slot = ch.submit(("ECHO", "mine"))
        t0 = time.monotonic()
        _sync.collect([(ch, slot)], t0 + 0.05, 0.05, needed=1)
        waited = time.monotonic() - t0
        assert not slot.done and reading.is_alive()
        assert waited < 5.0, waited  # late, not held up by the reader's far deadline
    finally:
        redis_server.resume()
    reading.join(10)
    ch._close()


# --- failures ------------------------------------------------------------------------------------


def test_failed_connect_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(channel, "RETRY_CONNECT", 60.0)  # no retry during this test
    ch = _sync.Channel(redis.Redis(port=free_port()), "down", dead_after=10)
    first = ch.submit(("PING",))
    _sync.collect([(ch, first)], far())
    assert isinstance(first.value, redis.ConnectionError)
    again = ch.submit(("PING",))  # no new connect: the failure is reported at once
    assert again.done and again.value is first.value
    assert not ch._connecting


async def test_failed_connect_fails_fast_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(channel, "RETRY_CONNECT", 60.0)
    ch = _async.Channel(aioredis.Redis(port=free_port()), "down", dead_after=10)
    first = ch.submit(("PING",))
    await _async.collect([(ch, first)], far())
    assert isinstance(first.value, redis.ConnectionError)
    again = ch.submit(("PING",))
    assert again.done and again.value is first.value
    assert not ch._connecting
    await ch.close()


def test_pinned_request_never_reaches_a_new_server(redis_server: RedisServer) -> None:
    """A request pinned to the connection a decision was made on fails once the node was
    reconnected (to a server that restarted without its data, here) instead of running there."""
    ch = _sync.Channel(redis_server.client(), "node", dead_after=10)
    first = ch.submit(("PING",))
    _sync.collect([(ch, first)], far())
    probe, epoch = ch.view
    assert probe is not None
    redis_server.restart()
    lost = ch.submit(("PING",), epoch=epoch)  # the old connection is gone: fails, no reconnect
    _sync.collect([(ch, lost)], far())
    assert isinstance(lost.value, redis.ConnectionError)
    again = ch.submit(("PING",))  # unpinned (a release, say): reconnects
    _sync.collect([(ch, again)], far())
    assert again.value is True or again.value == b"PONG"
    new_probe, new_epoch = ch.view
    assert new_probe is not None and new_probe.run_id != probe.run_id and new_epoch != epoch
    pinned = ch.submit(("PING",), epoch=epoch)
    assert pinned.done and isinstance(pinned.value, redis.ConnectionError)
    assert "reconnected" in str(pinned.value)
    ch._close()


async def test_paused_node_does_not_stall_asyncio(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    clients = [aioredis.Redis(port=s.port) for s in redis_nodes]
    ns = NodeSet(clients, node_timeout=0.1)
    lock = redlease.aio.Lock(ns, lock_name, ttl=5)
    await lock.acquire()
    await lock.release()
    redis_nodes[2].pause()
    try:
        for _ in range(3):
            start = time.monotonic()
            await lock.acquire(blocking=False)
            await lock.release()
            # one per-node timeout per fan-out, not the paused node's dead_after (10 s)
            assert time.monotonic() - start < 2.0
    finally:
        redis_nodes[2].resume()
    await ns.aclose()
    for c in clients:
        await c.aclose()


# --- no thread or task per request ---------------------------------------------------------------


def test_no_thread_per_request(
    redis_nodes: list[RedisServer], lock_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = NodeSet([s.client() for s in redis_nodes])
    lock = redlease.Lock(ns, lock_name, ttl=5)
    lock.acquire()  # connects (one short-lived thread per node)
    lock.release()
    started: list[str] = []
    real_start = threading.Thread.start

    def counting_start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    for _ in range(50):
        lock.acquire()
        lock.release()
    assert started == []
    ns.close()


async def test_no_task_per_request(redis_nodes: list[RedisServer], lock_name: str) -> None:
    clients = [aioredis.Redis(port=s.port) for s in redis_nodes]
    ns = NodeSet(clients)
    lock = redlease.aio.Lock(ns, lock_name, ttl=5)
    await lock.acquire()  # connects (one task per node)
    await lock.release()
    loop = asyncio.get_running_loop()
    created: list[Any] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        for _ in range(50):
            await lock.acquire()
            await lock.release()
    finally:
        loop.set_task_factory(None)
    assert created == []
    await ns.aclose()
    for c in clients:
        await c.aclose()
