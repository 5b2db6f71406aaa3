"""End to end: 1,000 DistributedLocks in KMock, the operator in kopf, one real redis-server.

Run: .venv/bin/python bench/measure_operator.py
Prints how long the operator takes to write a first status for every lock, and, in steady state,
the refresh cycle's size, Redis round trips and Kubernetes API writes per cycle.
"""

from __future__ import annotations

import asyncio
import sys
import time

import kmock
import kopf

from redlease.devtools.kubeemulator import (
    NAMESPACE,
    Cluster,
    Emulator,
    KopfThread,
    declare,
    until,
    watching,
)
from redlease.devtools.localredis import RedisServer
from redlease.kube.kubeconfig import ClusterAuth
from redlease.operator.handlers import OperatorConfig, Runtime, build_registry

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
REFRESH = 5.0


async def main() -> None:
    server = RedisServer().start()
    try:
        async with Emulator() as api, kmock.Server(api) as srv:
            declare(api)
            url = str(srv.url).rstrip("/")
            config = OperatorConfig(namespaces=(NAMESPACE,), refresh=REFRESH, kube=ClusterAuth(url))
            runtime = Runtime(config)
            async with KopfThread(build_registry(runtime, kopf.OperatorRegistry()), url, NAMESPACE):
                await until(lambda: watching(api), what="watch")
                cluster = Cluster(api, runtime, url)
                t0 = time.perf_counter()
                for i in range(N):
                    await cluster.create(
                        f"l{i}", {"keys": [f"k{i}"], "nodes": [{"url": server.url}]}
                    )
                created = time.perf_counter() - t0
                await until(
                    lambda: sum(1 for i in range(N) if cluster.status(f"l{i}").get("phase")) == N,
                    timeout=600,
                    what="all statuses",
                )
                first = time.perf_counter() - t0
                print(
                    f"{N} locks: created in {created:.1f}s, all statuses written after {first:.1f}s"
                )

                def writes() -> int:
                    return sum(1 for r in list(api._requests) if r.method == "PATCH")

                c0, w0, r0 = runtime.refresher.cycles, writes(), runtime.reader.round_trips
                await until(lambda: runtime.refresher.cycles >= c0 + 3, timeout=120, what="cycles")
                c1 = runtime.refresher.cycles
                print(
                    f"steady state over {c1 - c0} cycles: last cycle read "
                    f"{runtime.refresher.last_cycle_size} locks; "
                    f"{(runtime.reader.round_trips - r0) / (c1 - c0):.1f} Redis round trips/cycle; "
                    f"{(writes() - w0) / (c1 - c0):.1f} API PATCH writes/cycle"
                )
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
