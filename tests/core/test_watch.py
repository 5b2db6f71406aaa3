"""Reply deadlines on one timer per event loop (core/watch.py): a wait past its deadline is
cancelled and told apart from the caller's own cancellation; waits one after another with the
same bound schedule no timer of their own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from redlease.core import watch


class _CountingLoop(asyncio.SelectorEventLoop):
    """Counts the timers scheduled on it."""

    timers = 0

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        self.timers += 1
        return super().call_at(when, callback, *args, context=context)


def _run(coro: Any) -> Any:
    loop = _CountingLoop()
    try:
        return loop.run_until_complete(coro), loop
    finally:
        loop.close()


async def _bounded_wait(fut: asyncio.Future[Any], seconds: float) -> str:
    bound = watch.bound_task(seconds)
    try:
        await fut
    except asyncio.CancelledError:
        if watch.timed_out(bound):
            return "timed out"
        raise
    finally:
        bound.close()
    return "answered"


def test_a_wait_past_its_deadline_times_out_and_the_task_is_not_left_cancelled() -> None:
    async def main() -> tuple[str, int, str]:
        loop = asyncio.get_running_loop()
        first = await _bounded_wait(loop.create_future(), 0.05)
        task = asyncio.current_task()
        assert task is not None
        await asyncio.sleep(0)  # a cancel request left behind would raise here
        fut = loop.create_future()
        loop.call_soon(fut.set_result, 1)
        return first, task.cancelling(), await _bounded_wait(fut, 30.0)

    (first, cancelling, second), _ = _run(main())
    assert first == "timed out"
    assert cancelling == 0
    assert second == "answered"


def test_the_callers_own_cancellation_propagates() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(_bounded_wait(loop.create_future(), 30.0))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _run(main())


def test_a_cancellation_from_outside_in_the_same_turn_as_the_deadline_still_propagates() -> None:
    """Both cancel the task before it runs: the caller's must win (as with asyncio.timeout)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        dog = watch.watchdog(loop)
        task = asyncio.ensure_future(_bounded_wait(loop.create_future(), 30.0))
        await asyncio.sleep(0)
        # the deadline passes (fired by hand) and the caller cancels, before the task runs
        (live,) = dog._live
        live.deadline = loop.time()
        dog._fire()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _run(main())


def test_waits_one_after_another_share_one_timer() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(200):
            fut = loop.create_future()
            loop.call_soon(fut.set_result, None)
            assert await _bounded_wait(fut, 10.0) == "answered"

    _, loop = _run(main())
    assert loop.timers == 1  # asyncio.timeout: 200


def test_a_shorter_deadline_behind_a_longer_one_still_fires_on_time() -> None:
    async def main() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        long_wait = asyncio.ensure_future(_bounded_wait(loop.create_future(), 30.0))
        await asyncio.sleep(0)
        short = await _bounded_wait(loop.create_future(), 0.05)
        long_wait.cancel()
        try:
            await long_wait
            other = "answered"
        except asyncio.CancelledError:
            other = "cancelled"
        return short, other

    (short, other), _ = _run(main())
    assert short == "timed out"
    assert other == "cancelled"


def test_a_thousand_waits_each_end_at_their_own_deadline_never_before() -> None:
    """1,000 tasks waiting at once with deadlines spread over 0.2 s: every one times out, none
    before its deadline (the one timer moves from each deadline to the next due)."""

    async def main() -> list[tuple[float, float]]:
        loop = asyncio.get_running_loop()
        ends: list[tuple[float, float]] = []

        async def one(i: int) -> None:
            seconds = 0.05 + (i % 100) * 0.002
            start = loop.time()
            assert await _bounded_wait(loop.create_future(), seconds) == "timed out"
            ends.append((start + seconds, loop.time()))

        await asyncio.gather(*(one(i) for i in range(1000)))
        return ends

    ends, _ = _run(main())
    assert len(ends) == 1000
    assert all(ended >= due for due, ended in ends)  # never early
