"""Many waiters on one lock in one process: 1, 10, 100, 1,000 asyncio tasks and threads.

Each point runs in a fresh child process (RSS and connections are that process's alone) with
one default redis-py client and one lock name on a local redis-server:

* wake-up: N waiters queue behind a holder; each, once it has the lock, releases it at once;
  wake-up latency = a holder's acquire return - the previous holder's release call;
* timeout: N waiters with a 1 s timeout on a lock held throughout; overshoot = elapsed - 1 s
  (never negative: a waiter that gave up early is counted as ``early``);
* connections: the process's connections on the server (CLIENT LIST) while all N wait, and
  the peak seen during the wake-up chain; RSS of the process while all N wait.

Run alone: ``python -m bench.waiters [--quick]``; ``python -m bench --only waiters`` puts it in
the report.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from bench import stats

COUNTS = (1, 10, 100, 1000)
TIMEOUT = 1.0


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _conns(observer: redis.Redis) -> int:
    return len(observer.client_list()) - 1  # the observer's own excluded


class Peak:
    """The most connections on the server seen by a sampler thread (every 5 ms)."""

    def __init__(self, port: int) -> None:
        self.observer = redis.Redis(port=port)
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.most = max(self.most, len(self.observer.client_list()) - 2)  # both observers

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.observer.close()
        return self.most


def _summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "p50_ms": stats.percentile(ms, 50),
        "p99_ms": stats.percentile(ms, 99),
        "max_ms": max(ms, default=float("nan")),
    }


async def _aio_point(port: int, n: int, name: str) -> dict[str, Any]:
    import redis.asyncio as aioredis

    from redlease import aio
    from redlease.errors import LockTimeout

    observer = redis.Redis(port=port)
    client = aioredis.Redis(port=port)
    direct = f"redlease:{{{name}}}:direct"
    out: dict[str, Any] = {"waiters": n}
    peak = Peak(port)

    # wake-up chain
    holder = aio.Lock(client, name, ttl=60)
    await holder.acquire()
    marks: list[tuple[float, float]] = []  # (acquired, release called)

    async def chained() -> None:
        lock = aio.Lock(client, name, ttl=60)
        await lock.acquire(timeout=300)
        got = time.perf_counter()
        released = time.perf_counter()
        marks.append((got, released))
        await lock.release()

    tasks = [asyncio.create_task(chained()) for _ in range(n)]
    while int(observer.hlen(direct)) < n:  # polled: the server is the only witness
        await asyncio.sleep(0.005)  # noqa: ASYNC110
    out["connections_waiting"] = _conns(observer) - 1  # the sampler's excluded
    out["rss_mb_waiting"] = _rss_mb()
    start = time.perf_counter()
    marks.append((start, start))
    await holder.release()
    await asyncio.gather(*tasks)
    marks.sort()
    wake = [b[0] - a[1] for a, b in itertools.pairwise(marks)]
    out["wakeup"] = _summary(wake)
    out["connections_after"] = _conns(observer)

    # honest timeouts
    await holder.acquire()
    elapsed: list[float] = []

    async def timing_out() -> None:
        lock = aio.Lock(client, name, ttl=60)
        t0 = time.perf_counter()
        try:
            await lock.acquire(timeout=TIMEOUT)
        except LockTimeout:
            elapsed.append(time.perf_counter() - t0)

    await asyncio.gather(*(timing_out() for _ in range(n)))
    await holder.release()
    out["timeout"] = _summary([max(0.0, e - TIMEOUT) for e in elapsed])
    out["timeout"]["early"] = sum(1 for e in elapsed if e < TIMEOUT)
    out["timeout"]["timed_out"] = len(elapsed)
    out["connections_peak"] = peak.stop()
    await client.aclose()
    observer.close()
    return out


def _sync_point(port: int, n: int, name: str) -> dict[str, Any]:
    import redlease
    from redlease.errors import LockTimeout

    observer = redis.Redis(port=port)
    client = redis.Redis(port=port)
    direct = f"redlease:{{{name}}}:direct"
    out: dict[str, Any] = {"waiters": n}
    peak = Peak(port)
    holder = redlease.Lock(client, name, ttl=60)
    holder.acquire()
    marks: list[tuple[float, float]] = []
    guard = threading.Lock()

    def chained() -> None:
        lock = redlease.Lock(client, name, ttl=60)
        lock.acquire(timeout=300)
        got = time.perf_counter()
        with guard:
            marks.append((got, time.perf_counter()))
        lock.release()

    threads = [threading.Thread(target=chained, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    while int(observer.hlen(direct)) < n:
        time.sleep(0.005)
    out["connections_waiting"] = _conns(observer) - 1  # the sampler's excluded
    out["rss_mb_waiting"] = _rss_mb()
    start = time.perf_counter()
    marks.append((start, start))
    holder.release()
    for t in threads:
        t.join()
    marks.sort()
    out["wakeup"] = _summary([b[0] - a[1] for a, b in itertools.pairwise(marks)])
    out["connections_after"] = _conns(observer)

    holder.acquire()
    elapsed: list[float] = []

    def timing_out() -> None:
        lock = redlease.Lock(client, name, ttl=60)
        t0 = time.perf_counter()
        try:
            lock.acquire(timeout=TIMEOUT)
        except LockTimeout:
            with guard:
                elapsed.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=timing_out, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    holder.release()
    out["timeout"] = _summary([max(0.0, e - TIMEOUT) for e in elapsed])
    out["timeout"]["early"] = sum(1 for e in elapsed if e < TIMEOUT)
    out["timeout"]["timed_out"] = len(elapsed)
    out["connections_peak"] = peak.stop()
    client.close()
    observer.close()
    return out


def _child(flavour: str, port: int, n: int, name: str, conn: Any) -> None:
    try:
        if flavour == "asyncio":
            result = asyncio.run(_aio_point(port, n, name))
        else:
            result = _sync_point(port, n, name)
    except BaseException as exc:  # noqa: BLE001 - reported in the results
        result = {"waiters": n, "error": f"{type(exc).__name__}: {exc}"}
    conn.send(result)


def scenario(
    counts: tuple[int, ...] = COUNTS, log: Callable[[str], None] = print
) -> dict[str, Any]:
    from redlease.devtools.localredis import RedisServer

    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {"timeout_s": TIMEOUT, "asyncio": [], "threads": []}
    with RedisServer() as server:
        for flavour, key in (("asyncio", "asyncio"), ("threads", "threads")):
            for n in counts:
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_child, args=(flavour, server.port, n, f"w{flavour}{n}", send)
                )
                proc.start()
                row = recv.recv() if recv.poll(600) else {"waiters": n, "error": "no result"}
                proc.join(30)
                out[key].append(row)
                log(f"waiters {flavour} n={n}: {_line(row)}")
    return out


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return row["error"]
    w, t = row["wakeup"], row["timeout"]
    return (
        f"wake-up p50 {w['p50_ms']:.2f} ms p99 {w['p99_ms']:.2f} ms; timeout overshoot "
        f"p50 {t['p50_ms']:.1f} ms p99 {t['p99_ms']:.1f} ms (early {t['early']}); "
        f"connections {row['connections_waiting']} waiting, {row['connections_peak']} peak; "
        f"RSS {row['rss_mb_waiting']:.0f} MB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.waiters", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="1, 10 and 100 waiters only")
    args = ap.parse_args()
    counts = COUNTS[:3] if args.quick else COUNTS
    print(json.dumps(scenario(counts), indent=1))


if __name__ == "__main__":
    main()
