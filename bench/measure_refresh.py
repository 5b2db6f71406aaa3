"""Measure one status refresh of 1,000 DistributedLocks against real local redis-servers.

Run: .venv/bin/python bench/measure_refresh.py
Prints Redis round trips and wall time for a single node and a 3-node RedLock set, cold (new
clients, SCRIPT LOAD) and warm (steady state), median of several warm refreshes.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from redlease import Lock
from redlease.core.quorum import NodeSet
from redlease.devtools.localredis import RedisServer
from redlease.kube.spec import parse_spec
from redlease.operator.reader import NodeReader

N = 1000


async def measure(servers: list[RedisServer], label: str) -> None:
    clients = [s.client() for s in servers]
    target = clients[0] if len(clients) == 1 else NodeSet(clients)  # one lease on every node
    for i in range(0, N, 10):
        Lock(target, f"m-{i}", ttl=60, identity=f"pod-{i}").acquire()
    for c in clients:
        c.close()
    nodes = [{"url": s.url} for s in servers]
    specs = [(parse_spec({"keys": [f"m-{i}"], "nodes": nodes}), None) for i in range(N)]
    reader = NodeReader()
    t0 = time.perf_counter()
    await reader.read(specs)
    cold, cold_trips = time.perf_counter() - t0, reader.round_trips
    warm = []
    for _ in range(7):
        before = reader.round_trips
        t0 = time.perf_counter()
        obs = await reader.read(specs)
        warm.append(time.perf_counter() - t0)
        trips = reader.round_trips - before
    held = sum(1 for v, _ in obs if v.holder)
    await reader.aclose()
    print(
        f"{label}: cold {cold * 1000:.1f} ms / {cold_trips} round trips; "
        f"warm median {statistics.median(warm) * 1000:.1f} ms "
        f"(min {min(warm) * 1000:.1f}, max {max(warm) * 1000:.1f}) / {trips} round trips "
        f"({trips // len(servers)} per node); {held} held"
    )


async def main() -> None:
    one = [RedisServer().start()]
    three = [RedisServer().start() for _ in range(3)]
    try:
        await measure(one, f"{N} locks, 1 node")
        await measure(three, f"{N} locks, 3-node RedLock set")
    finally:
        for s in one + three:
            s.stop()


if __name__ == "__main__":
    asyncio.run(main())
