"""The campaign loop (Election over a lock backend): a scripted backend, then a Redis lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core.lease import Lease
from redlease.core.term import DEADLINE_PASSED, Election
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until
from redlease.election.campaign import (
    SHUTDOWN,
    Campaign,
    Defer,
    Granted,
    Policy,
    Refused,
)
from redlease.election.redislease import RedisLease
from redlease.errors import LockUnavailable, NotOwned

Answer = Callable[[], Granted[str] | Refused]


class Script:
    """A backend answering each attempt from ``answers`` (a callable, or an exception to
    raise); the last one repeats. Also the campaign's hooks: it records what they were told."""

    def __init__(self, *answers: Answer | BaseException) -> None:
        self.answers = list(answers)
        self.attempts: list[str] = []
        self.told: list[str] = []
        self.waits: list[float | None] = []
        self.changed = asyncio.Event()

    async def _answer(self, kind: str) -> Granted[str] | Refused:
        self.attempts.append(kind)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer()

    async def acquire(self, wait: float | None = None) -> Granted[str] | Refused:
        self.waits.append(wait)
        return await self._answer("acquire")

    async def renew(self) -> Granted[str] | Refused:
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


def fast(script: Script, policy: Policy | None = None) -> Campaign[str]:
    """A fast campaign: retry 10 ms, renew deadline 0.2 s."""
    election = Election(renew_every=0.01, retry_every=0.01, renew_deadline=0.2)
    return Campaign(election, script, script, acquire_timeout=0.5, policy=policy)


async def until(script: Script, done: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not done():
            script.changed.clear()
            await script.changed.wait()


class Running:
    """A fast campaign running in a task until :meth:`stop`; started elected when asked."""

    def __init__(
        self, script: Script, policy: Policy | None = None, campaign: Campaign[str] | None = None
    ) -> None:
        self.campaign = campaign or fast(script, policy)
        self.halt = asyncio.Event()
        self.task = asyncio.create_task(self.campaign.run(self.halt))

    async def elected(self, script: Script) -> Running:
        await until(script, lambda: bool(script.told))
        return self

    async def stop(self) -> None:
        self.halt.set()
        async with asyncio.timeout(10):
            await self.task


async def campaign_until(
    script: Script, done: Callable[[], bool], policy: Policy | None = None
) -> list[str]:
    """Run a fast campaign until ``done``, then stop it."""
    campaign = fast(script, policy)
    stop = asyncio.Event()
    task = asyncio.create_task(campaign.run(stop))
    await until(script, done)
    stop.set()
    await task
    return script.told


async def test_acquires_after_held_leads_renews_and_releases_on_stop() -> None:
    script = Script(lambda: Refused("other"), lambda: Refused("other"), granted())
    told = await campaign_until(script, lambda: bool(script.told))
    assert told == ["started mine", f"stopped {SHUTDOWN}", "released True"]
    assert script.attempts[:3] == ["acquire", "acquire", "acquire"]
    assert script.attempts[-1] == "release"


async def test_a_refusal_ends_the_term_at_once() -> None:
    script = Script(granted(), NotOwned("L", "gone"), lambda: Refused("other"))
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


class Rules:
    """A policy the test changes as it goes."""

    def __init__(self) -> None:
        self.wait: float | Defer | None = None
        self.hand: str | None = None
        self.after: float | None = None
        self.asked = 0

    def acquire(self, now: float) -> float | Defer | None:
        self.asked += 1
        return self.wait

    def hand_off(self, now: float) -> str | None:
        return self.hand

    def release_after(self) -> float | None:
        return self.after


async def test_the_policy_may_decline_an_acquire_and_wake_runs_at_once() -> None:
    rules = Rules()
    rules.wait = Defer(3600.0, "paused")  # an hour: only wake() ends it
    script = Script(granted())
    run = Running(script, rules)

    async def asked() -> bool:
        return rules.asked > 0

    await async_wait_until(asked)
    assert script.attempts == [] and run.campaign.idle == Defer(3600.0, "paused")
    rules.wait = 0.25  # unpaused: the acquire may wait 0.25 s for a release
    run.campaign.wake()
    await run.elected(script)
    assert script.told == ["started mine"] and script.waits == [0.25]
    await run.stop()


async def test_end_steps_down_with_its_reason_releases_and_runs_again() -> None:
    script = Script(granted())
    run = await Running(script).elected(script)
    run.campaign.end("drained")
    await until(script, lambda: len(script.told) >= 4)
    assert script.told[:4] == ["started mine", "stopped drained", "released True", "started mine"]
    await run.stop()


async def test_the_policy_hands_off_before_a_renewal() -> None:
    rules = Rules()
    script = Script(granted())
    run = await Running(script, rules).elected(script)
    rules.wait, rules.hand = Defer(3600.0), "hand-off to 'b'"  # and defer to it afterwards
    await until(script, lambda: len(script.told) >= 3)
    assert script.told == ["started mine", "stopped hand-off to 'b'", "released True"]
    assert not run.campaign.leading()
    await run.stop()


async def test_a_released_term_waits_for_release_after_or_is_left_to_expire() -> None:
    rules = Rules()
    script = Script(granted())
    run = await Running(script, rules).elected(script)
    held_until = time.monotonic() + 0.3
    rules.after = held_until  # a published claim runs until then
    await run.stop()
    assert script.told[-1] == "released True" and time.monotonic() >= held_until
    # the lock's own deadline first: not given back
    script = Script(lambda: Granted(time.monotonic(), "mine", time.monotonic() + 0.2))
    rules.after = time.monotonic() + 3600.0
    run = await Running(script, rules).elected(script)
    await run.stop()
    assert script.told[-1] == "released False" and "release" not in script.attempts


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
        assert await other.acquire() == Refused("me")  # contention is an answer naming the holder
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
        assert held == Refused("other", waited=True)
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


async def test_stop_cuts_a_pending_acquire_short_and_errors_are_heard() -> None:
    """A standby's acquire waiting for a release does not hold up the stop; every failed
    attempt's error goes to ``on_error`` (with whether it was a renewal)."""
    never = asyncio.Event()

    class Slow(Script):
        async def acquire(self, wait: float | None = None) -> Granted[str] | Refused:
            self.attempts.append("acquire")
            if len(self.attempts) == 1:
                raise LockUnavailable("L", "down")
            self.changed.set()
            await never.wait()
            return Refused("other")

    script = Slow(granted())
    errors: list[tuple[str, bool]] = []
    election = Election(renew_every=0.01, retry_every=0.01, renew_deadline=0.2)
    campaign = Campaign(
        election,
        script,
        script,
        acquire_timeout=3600.0,
        on_error=lambda exc, renewing: errors.append((type(exc).__name__, renewing)),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(campaign.run(stop))
    await until(script, lambda: len(script.attempts) >= 2)
    assert campaign.due_by > time.monotonic() + 3000  # its watchdog deadline: the budget
    stop.set()
    async with asyncio.timeout(5):
        await task
    assert errors == [("LockUnavailable", False)] and script.told == []


async def test_a_slow_failure_is_retried_a_period_after_its_send() -> None:
    """client-go's ticker: a renewal that failed after longer than the retry period is tried
    again at once, not a retry period after the failure."""
    sent: list[float] = []
    failed: list[float] = []

    class Slow(Script):
        async def renew(self) -> Granted[str] | Refused:
            sent.append(time.monotonic())
            if len(sent) == 1:
                await asyncio.sleep(1.2)  # the failed attempt's own duration
                failed.append(time.monotonic())
                raise LockUnavailable("L", "slow")
            return await super().renew()

    script = Slow(granted())
    election = Election(renew_every=0.05, retry_every=1.0, renew_deadline=10.0)
    campaign = Campaign(election, script, script, acquire_timeout=1.0)
    stop = asyncio.Event()
    task = asyncio.create_task(campaign.run(stop))
    await until(script, lambda: bool(script.told))

    async def retried() -> bool:
        return len(sent) >= 2

    await async_wait_until(retried)
    stop.set()
    await task
    # due 1 s after the first send, which the 1.2 s failure passed: sent right after it (a
    # retry period after the failure would be 1 s later)
    assert sent[1] - failed[0] < 0.8


async def test_end_cuts_a_hung_renewal_short() -> None:
    """A planned step-down (a drain's end) does not wait for a renewal that hangs: the lock is
    given back, the term is not left to run into its deadline."""
    never = asyncio.Event()

    class Hung(Script):
        async def renew(self) -> Granted[str] | Refused:
            self.attempts.append("renew")
            self.changed.set()
            await never.wait()
            return Refused()

    script = Hung(granted())
    election = Election(renew_every=0.01, retry_every=0.01, renew_deadline=3600.0)
    run = Running(script, campaign=Campaign(election, script, script, acquire_timeout=1.0))
    await until(script, lambda: "renew" in script.attempts)
    run.campaign.end("drain timed out")
    await until(script, lambda: len(script.told) >= 3)
    assert script.told == ["started mine", "stopped drain timed out", "released True"]
    await run.stop()
