"""The campaign loop (Election over a lock backend): a scripted backend, then a Redis lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core.campaign import SHUTDOWN, Campaign, Granted, Held, RedisLease
from redlease.core.election import DEADLINE_PASSED, Election
from redlease.core.lease import Lease
from redlease.devtools.localredis import RedisServer
from redlease.errors import LockUnavailable, NotOwned

Answer = Callable[[], Granted[str] | Held]


class Script:
    """A backend answering each attempt from ``answers`` (a callable, or an exception to
    raise); the last one repeats. Also the campaign's hooks: it records what they were told."""

    def __init__(self, *answers: Answer | BaseException) -> None:
        self.answers = list(answers)
        self.attempts: list[str] = []
        self.told: list[str] = []
        self.changed = asyncio.Event()

    async def _answer(self, kind: str) -> Granted[str] | Held:
        self.attempts.append(kind)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer()

    async def acquire(self) -> Granted[str] | Held:
        return await self._answer("acquire")

    async def renew(self) -> Granted[str] | Held:
        return await self._answer("renew")

    async def release(self) -> bool:
        self.attempts.append("release")
        return True

    def loss(self, exc: BaseException) -> str | None:
        return "refused" if isinstance(exc, NotOwned) else None

    async def started(self, granted: Granted[str]) -> None:
        self.told.append(f"started {granted.record}")
        self.changed.set()

    async def stopped(self, reason: str) -> None:
        self.told.append(f"stopped {reason}")
        self.changed.set()

    def released(self, outcome: bool | Exception) -> None:
        self.told.append(f"released {outcome}")


def granted(record: str = "mine") -> Answer:
    return lambda: Granted(time.monotonic(), record)


async def campaign_until(script: Script, done: Callable[[], bool]) -> list[str]:
    """Run a fast campaign (retry 10 ms, renew deadline 0.2 s) until ``done``, then stop it."""
    election = Election(renew_every=0.01, retry_every=0.01, renew_deadline=0.2)
    campaign = Campaign(election, script, script, acquire_timeout=0.5)
    stop = asyncio.Event()
    task = asyncio.create_task(campaign.run(stop))
    async with asyncio.timeout(10):
        while not done():
            script.changed.clear()
            await script.changed.wait()
    stop.set()
    await task
    return script.told


async def test_acquires_after_held_leads_renews_and_releases_on_stop() -> None:
    script = Script(lambda: Held("other"), lambda: Held("other"), granted())
    told = await campaign_until(script, lambda: bool(script.told))
    assert told == ["started mine", f"stopped {SHUTDOWN}", "released True"]
    assert script.attempts[:3] == ["acquire", "acquire", "acquire"]
    assert script.attempts[-1] == "release"


async def test_a_refusal_ends_the_term_at_once() -> None:
    script = Script(granted(), NotOwned("L", "gone"), lambda: Held("other"))
    told = await campaign_until(script, lambda: len(script.told) >= 2)
    assert told[:2] == ["started mine", "stopped refused"]
    assert "release" not in script.attempts  # nothing left to give back


async def test_transient_errors_are_retried_until_the_deadline() -> None:
    script = Script(granted(), LockUnavailable("L", "down"))
    started = time.monotonic()
    told = await campaign_until(script, lambda: len(script.told) >= 2)
    assert told[:2] == ["started mine", f"stopped {DEADLINE_PASSED}"]
    assert time.monotonic() - started >= 0.2
    assert script.attempts.count("renew") > 3  # retried every retry period meanwhile


async def test_a_redis_lease_is_one_backend(redis_server: RedisServer, lock_name: str) -> None:
    client = aioredis.Redis(
        host="127.0.0.1", port=redis_server.port, password=redis_server.password
    )
    try:
        lock = aio.Lock(client, lock_name, ttl=1, identity="me")
        told: list[object] = []
        leads = asyncio.Event()

        class Hooks:
            async def started(self, granted: Granted[Lease]) -> None:
                told.append(granted.record.fencing_token)
                leads.set()

            async def stopped(self, reason: str) -> None:
                told.append(reason)

            def released(self, outcome: bool | Exception) -> None:
                told.append(outcome)

        election = Election(renew_every=1 / 3, retry_every=0.1)
        campaign = Campaign(election, RedisLease(lock), Hooks(), acquire_timeout=1.0)
        stop = asyncio.Event()
        task = asyncio.create_task(campaign.run(stop))
        async with asyncio.timeout(10):
            await leads.wait()
        assert campaign.leading() and (await lock.state()).holder == "me"
        other = RedisLease(aio.Lock(client, lock_name, ttl=1, identity="other"))
        assert await other.acquire() == Held("me")  # contention is an answer naming the holder
        stop.set()
        await task
        assert told[1:] == [SHUTDOWN, True] and isinstance(told[0], int)
        assert (await lock.state()).holder is None
    finally:
        await client.aclose()


async def test_a_blocking_lock_runs_on_its_worker_and_a_late_grant_is_kept(
    redis_server: RedisServer, lock_name: str
) -> None:
    """A blocking lock's acquire runs on in its worker past the attempt's bound; if it was
    granted meanwhile, the next acquire renews that lease instead of being refused."""
    client = redis_server.client(socket_timeout=5)
    worker = ThreadPoolExecutor(1)
    try:
        lock = redlease.Lock(client, lock_name, ttl=5, identity="me")
        backend = RedisLease(lock, 0.05, offload=worker)
        other = redlease.Lock(client, lock_name, ttl=5, identity="other")
        other.acquire()
        held = await backend.acquire()  # waited for a release that did not come
        assert held == Held("other", waited=True)
        other.release()
        lock.acquire()  # what a late grant leaves: the handle holds a lease
        first = lock.lease()
        assert first is not None
        granted = await backend.acquire()
        assert isinstance(granted, Granted) and granted.record is first
        assert await backend.holder() == "me"
        assert await backend.release() and lock.lease() is None
    finally:
        worker.shutdown()
        client.close()
