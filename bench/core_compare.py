"""Quick comparison of the lock core against redis-py's Lock, in one run on one redis-server.

    .venv/bin/python bench/core_compare.py [--seconds 2] [--reps 3]

Prints uncontended acquire+release pairs/s (sync and asyncio) and the contended hand-off latency
between 2 processes holding the lock for 1 ms (greedy: the releaser competes again at once).
The full benchmark suite (`make bench`) is a separate issue; this is the small script the lock
core's closing note quotes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.localredis import RedisServer


def pairs_sync(make: Any, seconds: float) -> float:
    n = 0
    end = time.perf_counter() + seconds
    lock = make()
    start = time.perf_counter()
    while time.perf_counter() < end:
        lock.acquire()
        lock.release()
        n += 1
    return n / (time.perf_counter() - start)


async def pairs_async(make: Any, port: int, seconds: float) -> float:
    n = 0
    aclient = aioredis.Redis(port=port)
    lock = make(aclient)
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        await lock.acquire()
        await lock.release()
        n += 1
    rate = n / (time.perf_counter() - start)
    await aclient.aclose()
    return rate


def worker(kind: str, port: int, seconds: float) -> None:
    """One contender: loop acquire / hold 1 ms / release; print (attempt, acquired, released)."""
    client = redis.Redis(port=port)
    if kind == "redlease":
        lock: Any = redlease.Lock(client, "handoff", ttl=10)
    else:
        lock = client.lock("handoff-redispy", timeout=10)
    events = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        lock.acquire()
        t1 = time.monotonic()
        busy = t1 + 0.001
        while time.monotonic() < busy:
            pass
        t2 = time.monotonic()
        lock.release()
        events.append((t0, t1, t2))
    print(json.dumps(events))


def handoff(kind: str, port: int, seconds: float, procs: int = 2) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", kind, "--port", str(port)]
    ps = [
        subprocess.Popen([*cmd, "--seconds", str(seconds)], stdout=subprocess.PIPE, text=True)
        for _ in range(procs)
    ]
    per = [json.loads(p.communicate()[0]) for p in ps]
    sections = sorted((t1, t2, i, t0) for i, evs in enumerate(per) for t0, t1, t2 in evs)
    gaps = [
        (b[0] - a[1]) * 1000
        for a, b in zip(sections, sections[1:], strict=False)
        if a[2] != b[2]  # a real hand-off: another process got it
    ]
    waits = [(t1 - t0) * 1000 for t1, _t2, _i, t0 in sections]
    gaps.sort()
    return {
        "sections": len(sections),
        "handoffs": len(gaps),
        "p50_ms": statistics.median(gaps) if gaps else float("nan"),
        "p99_ms": gaps[int(len(gaps) * 0.99)] if gaps else float("nan"),
        "worst_wait_ms": max(waits),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--worker")
    ap.add_argument("--port", type=int)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.port, args.seconds)
        return
    with RedisServer() as server:
        client = redis.Redis(port=server.port)
        sync_contenders = {
            "redlease.Lock": lambda: redlease.Lock(client, "u1", ttl=10),
            "redis-py Lock": lambda: client.lock("u2", timeout=10),
        }
        async_contenders = {
            "redlease.aio.Lock": lambda c: aio.Lock(c, "u3", ttl=10),
            "redis.asyncio Lock": lambda c: c.lock("u4", timeout=10),
        }
        results: dict[str, list[float]] = {k: [] for k in [*sync_contenders, *async_contenders]}
        for name, make in sync_contenders.items():  # warm-up
            pairs_sync(make, 0.3)
        for _ in range(args.reps):  # interleaved repetitions
            for name, make in sync_contenders.items():
                results[name].append(pairs_sync(make, args.seconds))
            for name, make in async_contenders.items():
                results[name].append(asyncio.run(pairs_async(make, server.port, args.seconds)))
        print("uncontended acquire+release pairs/s (median of reps):")
        for name, vals in results.items():
            print(f"  {name:<22} {statistics.median(vals):8.0f}")
        print("contended hand-off, 2 processes, 1 ms hold, greedy:")
        for kind in ("redlease", "redis-py"):
            r = handoff(kind, server.port, max(args.seconds, 3.0))
            print(
                f"  {kind:<10} sections {r['sections']:5.0f}  hand-offs {r['handoffs']:5.0f}  "
                f"p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  "
                f"worst wait {r['worst_wait_ms']:7.1f} ms"
            )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    main()
