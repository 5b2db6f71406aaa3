"""N waiters on one RedLock lock (3 local nodes) giving up together: outages, overshoot.

Each point runs in a fresh child process: one :class:`~redlease.quorum.NodeSet` of 3
redis-server processes, a holder keeps the lock, and N threads (or asyncio tasks) call
``acquire(timeout=1)`` at once, so their deadlines fall together. Reported: how each ended
(``LockTimeout`` is the only right answer; ``QuorumUnavailable`` there is a client-side queue
reported as an outage), the overshoot of the timeout (monotonic time around each call; a
waiter that returned before its timeout is counted as ``early``), the connections per node
(CLIENT LIST) while they wait, and the process's CPU time. The single-node points are
:mod:`bench.waiters`. Run alone: ``python -m bench.quorum_waiters [--counts 100,300,1000]
[--node-timeout 0.25]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing as mp
import threading
import time
from typing import Any

import redis

from bench.waiters import TIMEOUT, _conns, _overshoot

COUNTS = (100, 300, 1000)
NODES = 3


def _ending(exc: BaseException | None) -> str:
    return "acquired" if exc is None else type(exc).__name__


def _sync_point(ports: list[int], n: int, node_timeout: float) -> dict[str, Any]:
    import redlease
    from redlease.quorum import NodeSet

    ns = NodeSet([redis.Redis(port=p) for p in ports], node_timeout=node_timeout)
    holder = redlease.Lock(ns, "qw", ttl=60)
    holder.acquire(timeout=10)
    start = threading.Barrier(n + 1)
    ends: list[tuple[float, str]] = []
    guard = threading.Lock()

    def waiter() -> None:
        lock = redlease.Lock(ns, "qw", ttl=60)
        start.wait()
        t0 = time.monotonic()
        error: BaseException | None = None
        try:
            lock.acquire(timeout=TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - counted by kind
            error = exc
        with guard:
            ends.append((time.monotonic() - t0, _ending(error)))

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    cpu = time.process_time()
    start.wait()
    time.sleep(TIMEOUT / 2)
    conns = [_conns(redis.Redis(port=p)) for p in ports]
    for t in threads:
        t.join()
    cpu = time.process_time() - cpu
    holder.release()
    ns.close()
    return _row(n, ends, conns, cpu)


async def _aio_point(ports: list[int], n: int, node_timeout: float) -> dict[str, Any]:
    import redis.asyncio as aioredis

    from redlease import aio
    from redlease.quorum import NodeSet

    ns = NodeSet([aioredis.Redis(port=p) for p in ports], node_timeout=node_timeout)
    holder = aio.Lock(ns, "qw", ttl=60)
    await holder.acquire(timeout=10)

    async def waiter() -> tuple[float, str]:
        lock = aio.Lock(ns, "qw", ttl=60)
        t0 = time.monotonic()
        error: BaseException | None = None
        try:
            await lock.acquire(timeout=TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - counted by kind
            error = exc
        return time.monotonic() - t0, _ending(error)

    cpu = time.process_time()
    tasks = [asyncio.create_task(waiter()) for _ in range(n)]
    await asyncio.sleep(TIMEOUT / 2)
    conns = await asyncio.to_thread(lambda: [_conns(redis.Redis(port=p)) for p in ports])
    ends = await asyncio.gather(*tasks)
    cpu = time.process_time() - cpu
    await holder.release()
    await ns.aclose()
    return _row(n, ends, conns, cpu)


def _row(n: int, ends: list[tuple[float, str]], conns: list[int], cpu: float) -> dict[str, Any]:
    return {
        "waiters": n,
        "endings": dict(collections.Counter(kind for _, kind in ends)),
        "timeout": _overshoot([elapsed for elapsed, _ in ends]),
        "connections_per_node": conns,
        "cpu_s": round(cpu, 3),
    }


def _child(flavour: str, ports: list[int], n: int, node_timeout: float, conn: Any) -> None:
    try:
        if flavour == "asyncio":
            result = asyncio.run(_aio_point(ports, n, node_timeout))
        else:
            result = _sync_point(ports, n, node_timeout)
    except BaseException as exc:  # noqa: BLE001 - reported in the results
        result = {"waiters": n, "error": f"{type(exc).__name__}: {exc}"}
    conn.send(result)


def scenario(counts: tuple[int, ...] = COUNTS, node_timeout: float = 0.25) -> dict[str, Any]:
    from redlease.devtools.localredis import RedisServer

    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {"timeout_s": TIMEOUT, "node_timeout_s": node_timeout}
    servers = [RedisServer().start() for _ in range(NODES)]
    try:
        ports = [s.port for s in servers]
        for flavour in ("threads", "asyncio"):
            out[flavour] = []
            for n in counts:
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(flavour, ports, n, node_timeout, send))
                proc.start()
                row = recv.recv() if recv.poll(600) else {"waiters": n, "error": "no result"}
                proc.join(30)
                out[flavour].append(row)
                print(f"{flavour} {_line(row)}", flush=True)
    finally:
        for s in servers:
            s.stop()
    return out


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"n={row['waiters']}: {row['error']}"
    t = row["timeout"]
    return (
        f"n={row['waiters']}: {row['endings']}, early {t['early']}; overshoot p50 "
        f"{t['p50_ms']:.0f} ms p99 {t['p99_ms']:.0f} ms max {t['max_ms']:.0f} ms; "
        f"connections per node {row['connections_per_node']}; CPU {row['cpu_s']:.2f} s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.quorum_waiters", description=__doc__)
    ap.add_argument("--counts", default=",".join(map(str, COUNTS)), help="waiters per point")
    ap.add_argument("--node-timeout", type=float, default=0.25, help="the NodeSet's node_timeout")
    args = ap.parse_args()
    counts = tuple(int(c) for c in args.counts.split(","))
    print(json.dumps(scenario(counts, args.node_timeout), indent=1))


if __name__ == "__main__":
    main()
