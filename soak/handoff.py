"""The soak's hand-off fault: a waiter SIGKILLed at a hand-off, every minute (soak/soak.py)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from typing import Any

import redis.asyncio

import redlease.aio
from redlease.core.keys import LockKeys
from redlease.devtools.polling import async_wait_until
from soak.common import say

HANDOFF_TTL = 60.0  # the waiters' TTL: what a hand-off to a dead one cost before
HANDOFF_BOUND = 20.0  # s: a live waiter not granted within this counts as failed
HANDOFF_EVERY = 60.0  # s between two waiters SIGKILLed at a hand-off (the first 10 s in)


async def handoff_killer(port: int, end: float, records: list[dict[str, Any]]) -> None:
    """Every HANDOFF_EVERY s until ``end`` (monotonic), a round on redis-server ``port``."""
    next_round = time.monotonic() + 10.0
    n = 0
    while next_round < end:
        await asyncio.sleep(max(0.0, next_round - time.monotonic()))
        next_round += HANDOFF_EVERY
        records.append(await handoff_round(port, f"soak-handoff-{n}"))
        n += 1
        say(f"hand-off to a SIGKILLed waiter: {records[-1]}")


async def enlisted(client: Any, direct: str, n: int) -> bool:
    """Whether ``n`` waiters are enlisted for the direct hand-off (``direct``: its hash)."""
    return int(await client.hlen(direct)) >= n


async def handoff_round(port: int, name: str) -> dict[str, Any]:
    """A waiter process enlists on a held lock and is SIGKILLed, the holder releases (the lease
    goes to the dead waiter, provisionally) and a live waiter, queued behind it, measures how
    long it waited from the release (the dead time)."""
    client = redis.asyncio.Redis(port=port)
    direct = LockKeys.for_name(name).direct
    waiter: asyncio.subprocess.Process | None = None
    task: asyncio.Task[Any] | None = None
    try:
        holder = redlease.aio.Lock(client, name, ttl=HANDOFF_TTL, identity="holder")
        first = await holder.acquire()
        waiter = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "redlease.devtools.lockworker", "hold",
            str(port), name, str(HANDOFF_TTL), "60",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await async_wait_until(lambda: enlisted(client, direct, 1), 60)
        waiter.kill()
        await waiter.wait()
        live = redlease.aio.Lock(client, name, ttl=HANDOFF_TTL, identity="live")
        live.prim = dataclasses.replace(
            live.prim,
            options=dataclasses.replace(live.prim.options, registration_grace=120),
        )  # queued behind the dead waiter, whose registration lapses first
        task = asyncio.create_task(live.acquire(timeout=HANDOFF_BOUND))
        await async_wait_until(lambda: enlisted(client, direct, 2), 60)
        released = time.monotonic()
        await holder.release()
        lease = await task
        dead = time.monotonic() - released
        state = await live.state()
        await live.release()
        return {
            "seconds": round(dead, 3),
            "handed_to_the_dead_waiter": state.transitions == first.transitions + 2,
            "tokens_rose": lease.fencing_token > first.fencing_token,
        }
    except (redlease.LockError, AssertionError) as exc:  # not granted / never enlisted
        return {"failed": f"{type(exc).__name__}: {exc}"}
    finally:
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, redlease.LockError):
                await task
        if waiter is not None and waiter.returncode is None:
            waiter.kill()
            await waiter.wait()
        await client.aclose()
