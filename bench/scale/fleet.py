"""Curve 2: a fleet of sidecars renewing on one redis-server, 10 to 1,000 electors.

How the fleet is simulated: the electors are the sidecar's own (``redlease.sidecar.elector.
Elector``, the loop ``redlease sidecar`` runs: acquire, renew every retry period, and beside it
the observer's heartbeat and status read every retry period), with the default timing (TTL
15 s, retry period 2 s), each on a lock of its own (one-replica deployments: every elector
leads), spread over a few processes (at most :data:`PROCESSES`; 250 electors per process at
1,000). Each elector has its own Redis client, as each sidecar process has, so each does its own
Functions library check (``FUNCTION LIST ... WITHCODE``, every ``RECHECK`` = 10 s per client,
core/scripting.py): the fleet's check cost is in the count as a real fleet would pay it.

Measured over a window once every elector leads: the server's execution time per renewal
(``INFO commandstats`` usec of every command the fleet sent, divided by the renewals the
electors report) and its main-thread CPU per renewal (``used_cpu_sys + used_cpu_user``
deltas, less the idle server's own CPU over as long, measured before the fleet starts), with the
per-command breakdown (renewal, heartbeat, status read, library check).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.scale import curves

COUNTS = (10, 100, 500, 1000)
QUICK_COUNTS = (10, 100)
PROCESSES = 4


def _cpu_us(client: redis.Redis) -> float:
    from bench.uncontended import server_cpu_us

    return server_cpu_us([client])


def _child(url: str, first: int, count: int, conn: Any) -> None:
    """Run ``count`` electors until told to stop; answer every message with the renewals so far."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the electors' logs are not wanted
    try:
        asyncio.run(_electors(url, first, count, conn))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


async def _electors(url: str, first: int, count: int, conn: Any) -> None:
    import random

    from redlease.core.connect import Target
    from redlease.sidecar.config import ElectionConfig
    from redlease.sidecar.elector import Hooks, SidecarElector

    class Counting(Hooks):
        renewals = 0

        def renewed(self, latency: float) -> None:
            Counting.renewals += 1

    target = Target((url,))
    electors = [
        SidecarElector(
            ElectionConfig(keys=(f"fleet-{i}",), identity=f"pod-{i}", target=target), Counting()
        )
        for i in range(first, first + count)
    ]
    tasks = []
    for e in electors:  # started over one retry period, as a fleet's pods start apart
        tasks.append(asyncio.create_task(e.run()))
        await asyncio.sleep(random.uniform(0, 2.0 / count))
    while not all(e.leading() for e in electors):  # noqa: ASYNC110 - no event to wait on
        await asyncio.sleep(0.1)
    loop = asyncio.get_running_loop()
    conn.send(("ready", Counting.renewals))
    while True:
        message = await loop.run_in_executor(None, conn.recv)
        if message == "stop":
            break
        conn.send(("renewals", Counting.renewals))
    for e in electors:
        e.stop()
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
    conn.send(("stopped", Counting.renewals))


def _point(n: int, window: float, idle: float, log: Callable[[str], None]) -> dict[str, Any]:
    from redlease.devtools.localredis import RedisServer

    load = [os.getloadavg()[0]]
    ctx = mp.get_context("spawn")
    with RedisServer() as server:
        rc = server.client()
        c0, t0 = _cpu_us(rc), time.perf_counter()
        time.sleep(idle)
        idle_us_per_s = (_cpu_us(rc) - c0) / (time.perf_counter() - t0)
        procs, pipes = [], []
        per = -(-n // PROCESSES)
        for first in range(0, n, per):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_child, args=(server.url, first, min(per, n - first), theirs))
            p.start()
            procs.append(p)
            pipes.append(mine)
        try:
            for pipe in pipes:
                if not pipe.poll(120):
                    raise RuntimeError("electors did not all lead within 120 s")
                kind, value = pipe.recv()
                if kind != "ready":
                    raise RuntimeError(value)
            time.sleep(2.0)

            def renewals() -> int:
                for pipe in pipes:
                    pipe.send("count")
                return sum(int(pipe.recv()[1]) for pipe in pipes)

            r0 = renewals()
            s0, cpu0, t0 = (
                curves.commandstats(rc.info("commandstats")),
                _cpu_us(rc),
                time.perf_counter(),
            )
            time.sleep(window)
            r1 = renewals()
            s1, cpu1, t1 = (
                curves.commandstats(rc.info("commandstats")),
                _cpu_us(rc),
                time.perf_counter(),
            )
            load.append(os.getloadavg()[0])
            clients = len(rc.client_list()) - 1
        finally:
            for pipe in pipes:
                with contextlib.suppress(OSError):
                    pipe.send("stop")
            for p in procs:
                p.join(40)
                if p.is_alive():
                    p.kill()
        rc.close()
    delta = curves.stat_delta(s0, s1)
    done = r1 - r0
    calls, usec = curves.totals(delta)
    seconds = t1 - t0
    check = delta.get("function|list", (0, 0.0))
    out = {
        "electors": n,
        "processes": len(procs),
        "window_s": seconds,
        "renewals": done,
        "renewals_per_s": done / seconds,
        "redis_calls_per_renewal": curves.per(calls, done),
        "redis_exec_us_per_renewal": curves.per(usec, done),
        "redis_cpu_us_per_renewal": curves.per(cpu1 - cpu0, done),
        "redis_net_cpu_us_per_renewal": curves.per(
            curves.net_cpu_us(cpu1 - cpu0, idle_us_per_s, seconds), done
        ),
        "idle_cpu_us_per_s": idle_us_per_s,
        "library_checks": check[0],
        "library_check_us_per_renewal": curves.per(check[1], done),
        "clients": clients,
        "redis_commands": {k: {"calls": c, "usec": u} for k, (c, u) in delta.items()},
        "load_1min": [*load, os.getloadavg()[0]],
    }
    log(
        f"fleet n={n}: {out['renewals_per_s']:.0f} renewals/s; Redis per renewal "
        f"{out['redis_exec_us_per_renewal']:.1f} us exec ({out['redis_calls_per_renewal']:.1f} "
        f"commands, library checks {out['library_check_us_per_renewal']:.1f} us), "
        f"{out['redis_net_cpu_us_per_renewal']:.1f} us CPU net of idle; {clients} clients"
    )
    return out


def scenario(
    counts: tuple[int, ...] = COUNTS,
    window: float = 20.0,
    idle: float = 3.0,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    points = []
    for n in counts:
        try:
            points.append(_point(n, window, idle, log))
        except Exception as exc:  # noqa: BLE001 - reported in the results
            log(f"fleet n={n}: {type(exc).__name__}: {exc}")
            points.append({"electors": n, "error": f"{type(exc).__name__}: {exc}"})
    return {"processes_max": PROCESSES, "ttl_s": 15, "retry_period_s": 2, "points": points}


if __name__ == "__main__":
    import json

    counts = tuple(int(a) for a in sys.argv[1:]) or QUICK_COUNTS
    print(json.dumps(scenario(counts, window=8.0), indent=1))
