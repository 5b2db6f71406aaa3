"""The public elector (``redlease.Elector``, ``redlease.aio.Elector``) on a real redis-server:
who leads, who hears about it, hand-off on stop, the renew deadline under a paused server,
callbacks that raise, option checks. Callbacks are recorded in queues; no sleeps."""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core.lease import Lease
from redlease.devtools.localredis import RedisServer

WAIT = 15.0  # generous bound for an event to arrive (a busy machine), never a sleep

# a lease long enough that a hand-off bounded by a fraction of it is clearly notified
SLOW = {"ttl": 10.0, "renew_deadline": 6.0, "retry_period": 1.0}


class Record:
    """What one elector's callbacks said, in order (thread-safe: the blocking elector calls
    them on its own thread)."""

    def __init__(self) -> None:
        self.events: queue.Queue[tuple[str, Any, float]] = queue.Queue()
        self.seen: list[tuple[str, Any]] = []

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_started_leading": lambda lease: self._put("started", lease),
            "on_stopped_leading": lambda reason: self._put("stopped", reason),
            "on_new_leader": lambda identity: self._put("leader", identity),
        }

    def _put(self, kind: str, value: Any) -> None:
        self.events.put((kind, value, time.monotonic()))

    def next(self, kind: str | None = None) -> tuple[str, Any, float]:
        """The next event (of ``kind``, skipping others), within :data:`WAIT`."""
        deadline = time.monotonic() + WAIT
        while True:
            event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            self.seen.append(event[:2])
            if kind is None or event[0] == kind:
                return event

    async def anext(self, kind: str | None = None) -> tuple[str, Any, float]:
        return await asyncio.to_thread(self.next, kind)


def elector(client: Any, name: str, identity: str, rec: Record, **timing: float) -> Any:
    return redlease.Elector(client, name, identity=identity, **(timing or SLOW), **rec.callbacks())


def aelector(client: Any, name: str, identity: str, rec: Record, **timing: float) -> Any:
    return aio.Elector(client, name, identity=identity, **(timing or SLOW), **rec.callbacks())


def test_one_leads_the_other_hears_of_it_and_takes_over_on_stop(
    any_client: Any, lock_name: str
) -> None:
    first, second = Record(), Record()
    a = elector(any_client, lock_name, "a", first).start()
    try:
        kind, lease, _ = first.next()
        assert (kind, lease) == ("leader", "a")  # its own grant names it first
        kind, lease, _ = first.next()
        assert kind == "started" and isinstance(lease, Lease) and lease.valid
        assert a.leading and a.lease is lease and a.leader == "a"
        b = elector(any_client, lock_name, "b", second).start()
        try:
            assert second.next()[:2] == ("leader", "a")
            assert a.leading and not b.leading and b.lease is None
            stopped_at = time.monotonic()
            a.stop()
            assert first.next()[:2] == ("stopped", redlease.Elector.STOPPED)
            assert not a.leading
            _, who, _ = second.next("leader")
            assert who == "b"
            _, new_lease, at = second.next("started")
            # notified hand-off (the release grants the waiter): well before the TTL, and
            # with a higher fencing token
            assert at - stopped_at < SLOW["ttl"] / 2
            assert new_lease.fencing_token > lease.fencing_token
            assert b.leading and b.lease.fencing_token == new_lease.fencing_token
        finally:
            b.stop()
        assert second.next()[:2] == ("stopped", redlease.Elector.STOPPED)
    finally:
        a.stop()
    assert any_client.exists(f"redlease:{{{lock_name}}}") == 0  # released


def test_a_standby_hears_of_a_new_leader_from_its_refused_acquire(
    redis_server: RedisServer, lock_name: str
) -> None:
    """Three candidates: when the leader stops, the standby that did not get the lease is told
    who did by its next refused acquire (no extra read)."""
    timing = {"ttl": 10.0, "renew_deadline": 6.0, "retry_period": 0.2}
    records = {name: Record() for name in "abc"}
    electors = {
        name: elector(redis_server.client(socket_timeout=5), lock_name, name, rec, **timing)
        for name, rec in records.items()
    }
    try:
        electors["a"].start()
        records["a"].next("started")
        for name in "bc":
            electors[name].start()
            assert records[name].next()[:2] == ("leader", "a")
        electors["a"].stop()
        _, winner, _ = records["b"].next("leader")  # each standby: the one who got it
        assert winner in "bc"
        assert records["c"].next("leader")[1] == winner
        records[winner].next("started")
        assert [e.leading for e in electors.values()].count(True) == 1
    finally:
        for e in electors.values():
            e.stop()


async def test_asyncio_flavour_same_story_with_async_callbacks(
    any_aclient: Any, lock_name: str
) -> None:
    first, second = Record(), Record()
    told: list[str] = []

    async def on_new_leader(identity: str) -> None:
        await asyncio.sleep(0)  # a coroutine callback is awaited
        told.append(identity)
        first.events.put(("leader", identity, time.monotonic()))

    client = any_aclient
    callbacks = first.callbacks() | {"on_new_leader": on_new_leader}
    a = aio.Elector(client, lock_name, identity="a", **SLOW, **callbacks)
    b = aelector(client, lock_name, "b", second)
    try:
        async with a:
            assert (await first.anext("started"))[0] == "started" and told == ["a"]
            assert a.leading and a.lease is not None
            token = a.lease.fencing_token
            await b.start()
            assert (await second.anext())[:2] == ("leader", "a")
            assert not b.leading
            stopped_at = time.monotonic()
        assert (await first.anext())[:2] == ("stopped", aio.Elector.STOPPED)
        assert not a.leading
        _, lease, at = await second.anext("started")
        assert at - stopped_at < SLOW["ttl"] / 2 and lease.fencing_token > token
        assert b.leading and b.leader == "b"
    finally:
        await b.stop()


def test_a_paused_redis_ends_the_term_at_the_renew_deadline(
    redis_server: RedisServer, lock_name: str
) -> None:
    rec = Record()
    timing = {"ttl": 3.0, "renew_deadline": 1.0, "retry_period": 0.25}
    e = elector(redis_server.client(socket_timeout=5), lock_name, "a", rec, **timing).start()
    try:
        _, lease, _ = rec.next("started")
        redis_server.pause()
        try:
            _, reason, at = rec.next("stopped")
            assert reason == redlease.Elector.DEADLINE_PASSED
            assert not e.leading and e.lease is None
            # stepped down before the lease could expire in Redis (its local deadline is
            # the last successful renewal's send time plus the TTL, minus drift)
            assert at < lease.deadline
        finally:
            redis_server.resume()
        rec.next("started")  # runs for the lock again once Redis answers
    finally:
        e.stop()


async def test_a_paused_redis_asyncio(redis_server: RedisServer, lock_name: str) -> None:
    rec = Record()
    timing = {"ttl": 3.0, "renew_deadline": 1.0, "retry_period": 0.25}
    client = aioredis.Redis(host="127.0.0.1", port=redis_server.port)
    e = aelector(client, lock_name, "a", rec, **timing)
    try:
        async with e:
            _, lease, _ = await rec.anext("started")
            redis_server.pause()
            try:
                _, reason, at = await rec.anext("stopped")
                assert reason == aio.Elector.DEADLINE_PASSED and not e.leading
                assert at < lease.deadline
            finally:
                redis_server.resume()
            await rec.anext("started")  # runs for the lock again once Redis answers
    finally:
        await client.aclose()


def test_a_raising_callback_is_logged_and_the_elector_goes_on(
    redis_server: RedisServer, lock_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    rec = Record()
    calls = rec.callbacks()

    def started(lease: Lease) -> None:
        calls["on_started_leading"](lease)
        raise RuntimeError("boom")

    def new_leader(identity: str) -> None:
        raise ValueError("bang")

    timing = {"ttl": 1.5, "renew_deadline": 1.0, "retry_period": 0.1}
    with caplog.at_level(logging.ERROR, logger="redlease"):
        e = redlease.Elector(
            redis_server.client(socket_timeout=5),
            lock_name,
            identity="a",
            **timing,
            on_started_leading=started,
            on_new_leader=new_leader,
            on_stopped_leading=calls["on_stopped_leading"],
        )
        with e:
            _, lease, _ = rec.next("started")
            # still leading after more renewals than one renew deadline holds
            first_deadline = lease.deadline
            deadline = time.monotonic() + WAIT
            while lease.deadline <= first_deadline + timing["renew_deadline"]:
                assert time.monotonic() < deadline, "no renewal after the raising callback"
                time.sleep(0.01)
            assert e.leading
        assert rec.next()[:2] == ("stopped", redlease.Elector.STOPPED)
    messages = [r.getMessage() for r in caplog.records]
    assert any("on_started_leading callback failed" in m for m in messages)
    assert any("on_new_leader callback failed" in m for m in messages)


def test_a_stopped_leader_leads_again_when_restarted(
    redis_server: RedisServer, lock_name: str
) -> None:
    rec = Record()
    e = elector(redis_server.client(socket_timeout=5), lock_name, "a", rec)
    for _ in range(2):  # after stopping, the next term reports the holder again
        with e:
            assert rec.next()[:2] == ("leader", "a")
            assert rec.next()[0] == "started"
        assert rec.next()[:2] == ("stopped", redlease.Elector.STOPPED)


def test_run_blocks_until_a_callback_stops_it(redis_server: RedisServer, lock_name: str) -> None:
    rec = Record()
    holder: list[Any] = []

    def started(lease: Lease) -> None:
        rec.events.put(("started", lease, time.monotonic()))
        holder[0].stop()  # from the elector's own thread: no join on itself

    e = redlease.Elector(
        redis_server.client(socket_timeout=5),
        lock_name,
        identity="a",
        **SLOW,
        on_started_leading=started,
        on_stopped_leading=rec.callbacks()["on_stopped_leading"],
    )
    holder.append(e)
    e.run()
    assert [k for k, _ in [rec.next()[:2], rec.next()[:2]]] == ["started", "stopped"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"ttl": 0.01}, "ttl"),
        ({"ttl": "15"}, "ttl"),
        ({"ttl": 5, "renew_deadline": 6}, "renew_deadline"),
        ({"ttl": 5, "retry_period": 0}, "retry_period"),
        ({"ttl": 5, "renew_deadline": 2, "retry_period": 3}, "retry_period"),
        ({"on_new_leader": "not callable"}, "on_new_leader"),
        ({"on_started_leading": 1}, "on_started_leading"),
    ],
)
def test_options_are_checked_naming_the_field(options: dict[str, Any], field: str) -> None:
    for flavour in (redlease.Elector, aio.Elector):
        with pytest.raises(redlease.ConfigError) as err:
            flavour(None, "lock", **options)
        assert err.value.field == field
