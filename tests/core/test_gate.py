"""The per-pool request gate (core/gate.py): at most GATE requests in flight per pool and
process, no lost wake-up on its lock-free fast path, a bounded wait."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from redlease.core import gate


def test_never_more_than_gate_slots_taken_and_every_waiter_served() -> None:
    g = gate.Gate()
    inside = 0
    peak = 0
    count = threading.Lock()
    done = []

    def worker() -> None:
        nonlocal inside, peak
        for _ in range(100):
            assert g.take(timeout=30.0)
            with count:
                inside += 1
                peak = max(peak, inside)
            with count:
                inside -= 1
            g.release()
        done.append(1)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(done) == 16  # nobody stuck: no wake-up lost between a release and a wait
    assert peak <= gate.GATE


def test_a_waiter_is_woken_by_a_release_and_a_full_gate_times_out() -> None:
    g = gate.Gate(slots=1)
    assert g.take(timeout=0)
    assert not g.take(timeout=0.05)  # full: the wait ends at its bound
    got = threading.Event()

    def waiter() -> None:
        if g.take(timeout=30.0):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    # the waiter is counted in before it sleeps; the release must wake it, not leave it
    pause = threading.Event()
    for _ in range(30_000):  # until it waits (at most ~30 s)
        if g._waiting:
            break
        pause.wait(0.001)
    assert g._waiting == 1
    g.release()
    assert got.wait(30.0)
    t.join(30)


# -- the asyncio gate ------------------------------------------------------------------------------


def test_async_gate_serves_every_task_in_turn_and_never_more_than_its_slots() -> None:
    async def main() -> tuple[int, list[int]]:
        g = gate.AsyncGate()
        inside = peak = 0
        order: list[int] = []

        async def worker(i: int) -> None:
            nonlocal inside, peak
            for _ in range(20):
                assert await g.take(timeout=30.0)
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0)  # others run while the slot is held
                inside -= 1
                g.release()
            order.append(i)

        await asyncio.gather(*(worker(i) for i in range(64)))
        return peak, order

    peak, order = asyncio.run(main())
    assert peak <= gate.GATE
    assert sorted(order) == list(range(64))  # nobody stuck


def test_async_gate_slot_handed_to_a_cancelled_waiter_goes_on() -> None:
    """A slot given back to a waiter that is cancelled before it runs must not be lost: with
    one slot, a lost one stops every later request of the pool for good."""

    async def main() -> bool:
        g = gate.AsyncGate(slots=1)
        assert g.take_now()
        first = asyncio.ensure_future(g.take(timeout=30.0))
        second = asyncio.ensure_future(g.take(timeout=30.0))
        await asyncio.sleep(0)  # both queue
        g.release()  # handed to ``first``...
        first.cancel()  # ...which is cancelled before it runs
        with contextlib.suppress(asyncio.CancelledError):
            await first
        return await asyncio.wait_for(second, 30.0)

    assert asyncio.run(main())


def test_async_gate_full_wait_ends_at_its_bound_and_queued_tasks_go_first() -> None:
    async def main() -> tuple[bool, bool, bool]:
        g = gate.AsyncGate(slots=1)
        assert g.take_now()
        timed_out = not await g.take(timeout=0.05)
        waiter = asyncio.ensure_future(g.take(timeout=30.0))
        await asyncio.sleep(0)
        g.release()
        jumped = g.take_now()  # the queued waiter was handed the slot: nothing is free
        got = await waiter
        return timed_out, jumped, got

    timed_out, jumped, got = asyncio.run(main())
    assert timed_out and not jumped and got
