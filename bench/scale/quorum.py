"""Curve 4: acquire latency on RedLock sets of 3, 5 and 7 local nodes (``redlease.quorum``).

One process, one ``NodeSet`` per set size on servers of its own, sync (``redlease.Lock``) and
asyncio (``redlease.aio.Lock``) clients; each sample is one uncontended ``acquire`` call (the
release that follows is not timed). The set sizes run interleaved in rounds so a drift of the
machine hits them alike. All the nodes share the machine's 2 cores with the client: a larger
set pays for its nodes' CPU too, as it would not on separate hosts.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from bench import stats

SIZES = (3, 5, 7)


def _sync_samples(lock: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        lock.acquire()
        out.append(time.perf_counter() - t0)
        lock.release()
    return out


async def _async_samples(lock: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await lock.acquire()
        out.append(time.perf_counter() - t0)
        await lock.release()
    return out


def scenario(
    pairs: int = 1000, rounds: int = 4, log: Callable[[str], None] = print
) -> dict[str, Any]:
    import redis.asyncio as aioredis

    import redlease
    from redlease import aio
    from redlease.devtools.localredis import RedisServer
    from redlease.quorum import NodeSet

    load = [os.getloadavg()[0]]
    # a set of servers per size: a node in several sets would carry the others' fencing
    # counters, and a set refuses members it sees as restarted without their data
    sets = {k: [RedisServer().start() for _ in range(k)] for k in SIZES}
    servers = [s for members in sets.values() for s in members]
    runner = asyncio.Runner()
    try:
        sync_locks = {
            k: redlease.Lock(NodeSet([s.client() for s in sets[k]]), f"q{k}", ttl=10) for k in SIZES
        }
        async_sets = {k: NodeSet([aioredis.Redis(port=s.port) for s in sets[k]]) for k in SIZES}
        async_locks = {k: aio.Lock(ns, f"qa{k}", ttl=10) for k, ns in async_sets.items()}
        samples: dict[tuple[str, int], list[float]] = {}
        per_round = max(1, pairs // rounds)
        for rep in range(rounds + 1):  # round 0 warms up (connections, script load)
            for k in stats.rotations(list(SIZES), rounds + 1)[rep]:
                s = _sync_samples(sync_locks[k], per_round if rep else 50)
                a = runner.run(_async_samples(async_locks[k], per_round if rep else 50))
                if rep:
                    samples.setdefault(("sync", k), []).extend(s)
                    samples.setdefault(("asyncio", k), []).extend(a)
        for ns in async_sets.values():
            runner.run(ns.aclose())
    finally:
        runner.close()
        for s in servers:
            s.stop()
    points = []
    for (flavour, k), values in sorted(samples.items()):
        ms = [v * 1000 for v in values]
        points.append(
            {
                "nodes": k,
                "flavour": flavour,
                "acquires": len(ms),
                "p50_ms": stats.percentile(ms, 50),
                "p99_ms": stats.percentile(ms, 99),
                "max_ms": max(ms),
            }
        )
        log(
            f"quorum {flavour} {k} nodes: acquire p50 {points[-1]['p50_ms']:.2f} ms, "
            f"p99 {points[-1]['p99_ms']:.2f} ms"
        )
    load.append(os.getloadavg()[0])
    return {"points": points, "load_1min": load}


if __name__ == "__main__":
    import json

    print(json.dumps(scenario(200, 2), indent=1))
