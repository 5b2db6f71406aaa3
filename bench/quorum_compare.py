"""RedLock on 3 local nodes: redlease vs pottery's Redlock vs aioredlock, in one run.

    .venv/bin/python -m bench.quorum_compare [--seconds 2]

Prints uncontended acquire+release pairs/s on 3 independent redis-servers (sync and asyncio),
redlease's acquire latency (p50/p99) on 3 nodes against 1 node, and the quorum fairness run
(:func:`fairness`: critical sections per greedy process, leftover waiter registrations). Needs
the `bench` extra. :func:`scenario` is the ``quorum`` scenario of ``python -m bench`` and
:func:`fairness_checks` its rows of the targets table.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease.core.keys import LockKeys
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


# --- fairness: greedy processes on one quorum lock ----------------------------------------------

HOLD = 0.001  # busy-wait inside each critical section, as in bench/handoff.py


def _greedy(ports: list[int], name: str, start: float, seconds: float, out: Any) -> None:
    """One greedy process: acquire, hold ``HOLD``, release, at once again, until the window
    closes; sends its count of critical sections."""
    ns = NodeSet([redis.Redis(host="127.0.0.1", port=p) for p in ports])
    warm = redlease.Lock(ns, f"{name}-warm-{time.monotonic_ns()}", ttl=10)
    warm.acquire()
    warm.release()
    lock = redlease.Lock(ns, name, ttl=10)
    while time.monotonic() < start:
        time.sleep(0.001)
    end = start + seconds
    sections = 0
    while time.monotonic() < end:
        lock.acquire()
        until = time.monotonic() + HOLD
        while time.monotonic() < until:
            pass
        lock.release()
        sections += 1
    ns.close()
    out.send(sections)


def waiter_registrations(ports: list[int], name: str) -> list[int]:
    """Members of the lock's waiter zset on every node (lapsed ones included)."""
    key = LockKeys.for_name(name).waiters
    counts = []
    for p in ports:
        c = redis.Redis(host="127.0.0.1", port=p)
        counts.append(int(c.zcard(key)))
        c.close()
    return counts


def fairness(
    ports: list[int], processes: int = 4, seconds: float = 2.0, name: str = "fair"
) -> dict[str, Any]:
    """``processes`` greedy processes on one lock over the nodes ``ports`` for ``seconds``.

    Returns the critical sections per process, max/min of them (the fairness ratio: 1.0 is
    perfectly fair), and the waiter registrations left on each node right after every process
    has exited (a granted or abandoned acquire must leave none).
    """
    ctx = mp.get_context("spawn")
    start = time.monotonic() + 3.0  # spawning and importing takes a while on 2 busy cores
    pipes, procs = [], []
    for _ in range(processes):
        rx, tx = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_greedy, args=(ports, name, start, seconds, tx))
        proc.start()
        pipes.append(rx)
        procs.append(proc)
    counts = [rx.recv() for rx in pipes]
    for proc in procs:
        proc.join()
    leftover = waiter_registrations(ports, name)
    ratio = max(counts) / min(counts) if min(counts) else math.inf
    return {"processes": processes, "seconds": seconds, "sections": counts, "ratio": ratio,
            "leftover_waiters": leftover}  # fmt: skip


def scenario(seconds: float, log: Callable[[str], None]) -> dict[str, Any]:
    """The ``quorum`` scenario of ``python -m bench``: fairness on 3 nodes (results.json)."""
    servers = [RedisServer().start() for _ in range(3)]
    try:
        log("quorum fairness: 4 greedy processes, 3 nodes ...")
        return {"fairness": fairness([s.port for s in servers], seconds=max(seconds, 1.0))}
    finally:
        for s in servers:
            s.stop()


def fairness_checks(results: dict[str, Any]) -> list[Any]:
    """The quorum rows of the targets table (:mod:`bench.targets`)."""
    from bench.targets import Check, _rate, _ratio_check

    pairs = (  # (target, ours, theirs, ratio needed): same run, pairs/s
        ("3-node quorum asyncio >= 1.0x aioredlock", "redlease aio.Lock", "aioredlock", 1.0),
        ("3-node quorum sync >= 4x pottery Redlock", "redlease Lock", "pottery Redlock", 4.0),
    )
    out = [
        _ratio_check(
            label, _rate(results, f"{ours} (3 nodes)"), _rate(results, f"{theirs} (3 nodes)"), need
        )
        for label, ours, theirs, need in pairs
    ]
    fair = results.get("quorum", {}).get("fairness")
    target = "quorum fairness max/min <= 1.5 (4 greedy, 3 nodes)"
    if not fair:
        out.append(Check(target, "not measured", None))
        return out
    ratio, left = fair["ratio"], sum(fair["leftover_waiters"])
    sections = "/".join(str(n) for n in fair["sections"])
    out.append(
        Check(
            target,
            f"{ratio:.2f} (sections {sections})",
            ratio <= 1.5,
        )
    )
    out.append(Check("quorum: no waiter registration left", f"{left} left", left == 0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--fairness-only", action="store_true", help="only the fairness run")
    args = parser.parse_args()
    if args.fairness_only:
        result = scenario(args.seconds, print)["fairness"]
        print(f"sections per process {result['sections']}  max/min {result['ratio']:.2f}")
        print(f"waiter registrations left per node {result['leftover_waiters']}")
        return
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
