"""RedLock on 3 local nodes: redlease vs pottery's Redlock vs aioredlock, in one run.

    .venv/bin/python bench/quorum_compare.py [--seconds 2]

Prints uncontended acquire+release pairs/s on 3 independent redis-servers (sync and asyncio),
and redlease's acquire latency (p50/p99) on 3 nodes against 1 node. Needs the `bench` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import redis
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease.devtools.localredis import RedisServer
from redlease.quorum import NodeSet


def rate_sync(acquire: Any, release: Any, seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        acquire()
        release()
        n += 1
    return n / (time.perf_counter() - start)


async def rate_async(acquire: Any, release: Any, seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        token = await acquire()
        await release(token)
        n += 1
    return n / (time.perf_counter() - start)


def latency(ns: NodeSet, name: str, rounds: int = 500) -> tuple[float, float]:
    lock = redlease.Lock(ns, name, ttl=10)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        lock.acquire()
        samples.append(time.perf_counter() - t)
        lock.release()
    samples.sort()
    return statistics.median(samples) * 1e3, samples[int(len(samples) * 0.99)] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    secs = args.seconds
    servers = [RedisServer().start() for _ in range(3)]
    try:
        ports = [s.port for s in servers]
        results: dict[str, float] = {}

        ns = NodeSet([redis.Redis(port=p) for p in ports])
        lock = redlease.Lock(ns, "bench-sync", ttl=10)
        results["redlease sync, 3 nodes"] = rate_sync(lock.acquire, lock.release, secs)

        from pottery import Redlock

        masters = {redis.Redis(port=p) for p in ports}
        pl = Redlock(key="bench-pottery", masters=masters, auto_release_time=10)
        results["pottery Redlock, 3 nodes"] = rate_sync(pl.acquire, pl.release, secs)

        async def run_async() -> None:
            ans = NodeSet([aioredis.Redis(port=p) for p in ports])
            al = redlease.aio.Lock(ans, "bench-async", ttl=10)

            async def rl_release(_: object) -> None:
                await al.release()

            results["redlease asyncio, 3 nodes"] = await rate_async(al.acquire, rl_release, secs)
            await ans.aclose()

            from aioredlock import Aioredlock

            manager = Aioredlock([{"host": "127.0.0.1", "port": p} for p in ports])

            async def ar_acquire() -> Any:
                return await manager.lock("bench-aioredlock", lock_timeout=10)

            results["aioredlock, 3 nodes"] = await rate_async(ar_acquire, manager.unlock, secs)
            await manager.destroy()

        asyncio.run(run_async())
        for name, value in results.items():
            print(f"{name:32s} {value:8.0f} pairs/s")
        base = results["pottery Redlock, 3 nodes"]
        print(f"redlease sync / pottery: {results['redlease sync, 3 nodes'] / base:.2f}x")
        print(
            "redlease asyncio / aioredlock: "
            f"{results['redlease asyncio, 3 nodes'] / results['aioredlock, 3 nodes']:.2f}x"
        )
        p50_3, p99_3 = latency(ns, "lat3")
        one = NodeSet([redis.Redis(port=ports[0])])
        p50_1, p99_1 = latency(one, "lat1")
        single = redlease.Lock(redis.Redis(port=ports[0]), "lat-plain", ttl=10)
        plain = []
        for _ in range(500):
            t = time.perf_counter()
            single.acquire()
            plain.append(time.perf_counter() - t)
            single.release()
        plain.sort()
        print(f"acquire latency 3 nodes: p50 {p50_3:.3f} ms  p99 {p99_3:.3f} ms")
        print(f"acquire latency 1 node (NodeSet): p50 {p50_1:.3f} ms  p99 {p99_1:.3f} ms")
        print(
            f"acquire latency 1 node (plain client): p50 {statistics.median(plain) * 1e3:.3f} ms"
            f"  p99 {plain[int(len(plain) * 0.99)] * 1e3:.3f} ms"
        )
        ns.close()
        one.close()
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
