"""Many waiters on one lock in one process: 1, 10, 100, 1,000 asyncio tasks and threads.

Each point runs in a fresh child process (RSS and connections are that process's alone) with
one default redis-py client and one lock name on a local redis-server:

* wake-up: N waiters queue behind a holder; each, once it has the lock, releases it at once
  (small N repeat the chain to get 200 samples);
  wake-up latency = a holder's acquire return - the previous holder's release call;
* timeout: N waiters with a 1 s timeout on a lock held throughout, all started at once (their
  deadlines fall together: the worst case); overshoot = elapsed - 1 s (never negative: a
  waiter that gave up early is counted as ``early``);
* timeout among N: N - 1 waiters wait on while 20 probes, started 50 ms apart, time out
  after 1 s: what one waiter's timeout costs when N wait;
* connections: the process's connections on the server (CLIENT LIST) while all N wait, and
  the peak seen during the wake-up chain; RSS of the process while all N wait.

``--kind writer`` runs the same points with writers of a ``ReadWriteLock`` (the hand-off by
wake token, no direct grant: a thread that times out makes its own last attempt, then its
LEAVE). Run alone: ``python -m bench.waiters [--quick] [--kind writer]``; ``python -m bench
--only waiters`` puts the mutex points in the report.
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
KINDS = ("lock", "writer")  # redlease.Lock, or the writer of a redlease.ReadWriteLock
TIMEOUT = 1.0
WAKE_SAMPLES = 200  # small points repeat their wake-up chain to get at least this many
TIMEOUT_SAMPLES = 10  # ... and their timeouts (each round takes TIMEOUT)


PROBES = 20  # timeouts measured among N waiters, started PROBE_GAP apart
PROBE_GAP = 0.05
SPAN = TIMEOUT + PROBES * PROBE_GAP + 1.0  # the other waiters' timeout: past the last probe


def _overshoot(elapsed: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = _summary([max(0.0, e - TIMEOUT) for e in elapsed])
    out["early"] = sum(1 for e in elapsed if e < TIMEOUT)
    out["timed_out"] = len(elapsed)
    return out


def _rounds(n: int, samples: int) -> int:
    return max(1, -(-samples // n))


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


def _lock(module: Any, kind: str, client: Any, name: str) -> Any:
    """A lock of ``kind`` from ``module`` (``redlease`` or ``redlease.aio``) with a long TTL."""
    if kind == "writer":
        return module.ReadWriteLock(client, name, ttl=60).writer()
    return module.Lock(client, name, ttl=60)


def _waiting(observer: redis.Redis, kind: str, name: str) -> int:
    """How many wait for ``name`` (enlisted for a direct grant, or registered)."""
    if kind == "writer":
        return int(observer.zcard(f"redlease:{{{name}}}:waiters"))
    return int(observer.hlen(f"redlease:{{{name}}}:direct"))


def _summary(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "p50_ms": stats.percentile(ms, 50),
        "p99_ms": stats.percentile(ms, 99),
        "max_ms": max(ms, default=float("nan")),
    }


async def _aio_point(port: int, n: int, name: str, kind: str = "lock") -> dict[str, Any]:
    import redis.asyncio as aioredis

    from redlease import aio
    from redlease.errors import LockTimeout

    observer = redis.Redis(port=port)
    client = aioredis.Redis(port=port)
    out: dict[str, Any] = {"waiters": n}
    peak = Peak(port)

    # wake-up chain
    holder = _lock(aio, kind, client, name)
    marks: list[tuple[float, float]] = []  # (acquired, release called)

    async def chained() -> None:
        lock = _lock(aio, kind, client, name)
        await lock.acquire(timeout=300)
        got = time.perf_counter()
        released = time.perf_counter()
        marks.append((got, released))
        await lock.release()

    wake: list[float] = []
    for _ in range(_rounds(n, WAKE_SAMPLES)):
        await holder.acquire()
        marks.clear()
        tasks = [asyncio.create_task(chained()) for _ in range(n)]
        # polled (the server is the only witness) until all wait, or one failed
        while _waiting(observer, kind, name) < n and not any(t.done() for t in tasks):  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        out["connections_waiting"] = _conns(observer) - 1  # the sampler's excluded
        out["rss_mb_waiting"] = _rss_mb()
        start = time.perf_counter()
        marks.append((start, start))
        await holder.release()
        await asyncio.gather(*tasks)
        marks.sort()
        wake += [b[0] - a[1] for a, b in itertools.pairwise(marks)]
    out["wakeup"] = _summary(wake)
    out["connections_after"] = _conns(observer)

    # honest timeouts
    await holder.acquire()
    elapsed: list[float] = []

    async def timing_out(
        into: list[float] | None = None, timeout: float = TIMEOUT, delay: float = 0.0
    ) -> None:
        await asyncio.sleep(delay)
        lock = _lock(aio, kind, client, name)
        t0 = time.perf_counter()
        try:
            await lock.acquire(timeout=timeout)
        except LockTimeout:
            (elapsed if into is None else into).append(time.perf_counter() - t0)

    for _ in range(_rounds(n, TIMEOUT_SAMPLES)):
        await asyncio.gather(*(timing_out() for _ in range(n)))
    # one timeout among N waiters: N - 1 wait on while probes, spaced out, time out
    among: list[float] = []
    rest: list[float] = []
    background = [asyncio.create_task(timing_out(rest, SPAN)) for _ in range(n - 1)]
    while _waiting(observer, kind, name) < n - 1 and not any(t.done() for t in background):  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    await asyncio.gather(*(timing_out(among, delay=i * PROBE_GAP) for i in range(PROBES)))
    await asyncio.gather(*background)
    await holder.release()
    out["timeout"] = _overshoot(elapsed)
    out["timeout_among"] = _overshoot(among)
    out["connections_peak"] = peak.stop()
    await client.aclose()
    observer.close()
    return out


def _sync_point(port: int, n: int, name: str, kind: str = "lock") -> dict[str, Any]:
    import redlease
    from redlease.errors import LockTimeout

    observer = redis.Redis(port=port)
    client = redis.Redis(port=port)
    out: dict[str, Any] = {"waiters": n}
    peak = Peak(port)
    holder = _lock(redlease, kind, client, name)
    marks: list[tuple[float, float]] = []
    guard = threading.Lock()

    def chained() -> None:
        lock = _lock(redlease, kind, client, name)
        lock.acquire(timeout=300)
        got = time.perf_counter()
        with guard:
            marks.append((got, time.perf_counter()))
        lock.release()

    wake: list[float] = []
    for _ in range(_rounds(n, WAKE_SAMPLES)):
        holder.acquire()
        marks.clear()
        threads = [threading.Thread(target=chained, daemon=True) for _ in range(n)]
        for t in threads:
            t.start()
        while _waiting(observer, kind, name) < n and all(t.is_alive() for t in threads):
            time.sleep(0.005)
        out["connections_waiting"] = _conns(observer) - 1  # the sampler's excluded
        out["rss_mb_waiting"] = _rss_mb()
        start = time.perf_counter()
        marks.append((start, start))
        holder.release()
        for t in threads:
            t.join()
        marks.sort()
        wake += [b[0] - a[1] for a, b in itertools.pairwise(marks)]
    out["wakeup"] = _summary(wake)
    out["connections_after"] = _conns(observer)

    holder.acquire()
    elapsed: list[float] = []

    def timing_out(
        into: list[float] | None = None, timeout: float = TIMEOUT, delay: float = 0.0
    ) -> None:
        time.sleep(delay)
        lock = _lock(redlease, kind, client, name)
        t0 = time.perf_counter()
        try:
            lock.acquire(timeout=timeout)
        except LockTimeout:
            with guard:
                (elapsed if into is None else into).append(time.perf_counter() - t0)

    def run(threads: list[threading.Thread]) -> list[threading.Thread]:
        for t in threads:
            t.start()
        return threads

    for _ in range(_rounds(n, TIMEOUT_SAMPLES)):
        for t in run([threading.Thread(target=timing_out, daemon=True) for _ in range(n)]):
            t.join()
    among: list[float] = []
    rest: list[float] = []
    background = run(
        [threading.Thread(target=timing_out, args=(rest, SPAN), daemon=True) for _ in range(n - 1)]
    )
    while _waiting(observer, kind, name) < n - 1 and all(t.is_alive() for t in background):
        time.sleep(0.005)
    probes = [
        threading.Thread(target=timing_out, args=(among, TIMEOUT, i * PROBE_GAP), daemon=True)
        for i in range(PROBES)
    ]
    for t in run(probes) + background:
        t.join()
    holder.release()
    out["timeout"] = _overshoot(elapsed)
    out["timeout_among"] = _overshoot(among)
    out["connections_peak"] = peak.stop()
    client.close()
    observer.close()
    return out


def _child(flavour: str, port: int, n: int, name: str, conn: Any, kind: str = "lock") -> None:
    try:
        if flavour == "asyncio":
            result = asyncio.run(_aio_point(port, n, name, kind))
        else:
            result = _sync_point(port, n, name, kind)
    except BaseException as exc:  # noqa: BLE001 - reported in the results
        result = {"waiters": n, "error": f"{type(exc).__name__}: {exc}"}
    conn.send(result)


def scenario(
    counts: tuple[int, ...] = COUNTS, log: Callable[[str], None] = print, kind: str = "lock"
) -> dict[str, Any]:
    from redlease.devtools.localredis import RedisServer

    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {"timeout_s": TIMEOUT, "kind": kind, "asyncio": [], "threads": []}
    with RedisServer() as server:
        for flavour, key in (("asyncio", "asyncio"), ("threads", "threads")):
            for n in counts:
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(
                    target=_child,
                    args=(flavour, server.port, n, f"w{kind}{flavour}{n}", send, kind),
                )
                proc.start()
                row = recv.recv() if recv.poll(600) else {"waiters": n, "error": "no result"}
                proc.join(30)
                out[key].append(row)
                log(f"waiters {kind} {flavour} n={n}: {_line(row)}")
    return out


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return str(row["error"])
    w, t, a = row["wakeup"], row["timeout"], row["timeout_among"]
    return (
        f"wake-up p50 {w['p50_ms']:.2f} ms p99 {w['p99_ms']:.2f} ms; timeout overshoot "
        f"p50 {t['p50_ms']:.1f} ms p99 {t['p99_ms']:.1f} ms (early {t['early']}), "
        f"among N p50 {a['p50_ms']:.1f} p99 {a['p99_ms']:.1f} ms (early {a['early']}); "
        f"connections {row['connections_waiting']} waiting, {row['connections_peak']} peak; "
        f"RSS {row['rss_mb_waiting']:.0f} MB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.waiters", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="1, 10 and 100 waiters only")
    ap.add_argument("--kind", choices=KINDS, default="lock", help="the lock the waiters wait on")
    args = ap.parse_args()
    counts = COUNTS[:3] if args.quick else COUNTS
    print(json.dumps(scenario(counts, kind=args.kind), indent=1))


if __name__ == "__main__":
    main()


def _worst(res: dict[str, Any], n: int, pick: Callable[[dict[str, Any]], float]) -> float:
    rows = [r for f in ("asyncio", "threads") for r in res.get(f, []) if r["waiters"] == n]
    values = [pick(r) for r in rows if "error" not in r]
    return max(values) if values else float("nan")


def checks(results: dict[str, Any]) -> list[Any]:
    """The waiter targets (shared/DESIGN.md, "Performance anchors") at 1,000 waiters, the
    worse of the asyncio and thread flavours."""
    from bench.checks import Check

    res = results.get("waiters")
    n = max((r["waiters"] for r in (res or {}).get("asyncio", [])), default=0)
    if not res or n < 1000:
        return [
            Check("1,000 waiters: wake-up p99, overshoot p99, connections", "not measured", None)
        ]
    wake = _worst(res, n, lambda r: float(r["wakeup"]["p99_ms"]))
    over = _worst(res, n, lambda r: float(r["timeout_among"]["p99_ms"]))
    together = _worst(res, n, lambda r: float(r["timeout"]["p99_ms"]))
    conns = _worst(res, n, lambda r: float(r["connections_peak"]))
    return [
        Check("1,000 waiters: wake-up p99 <= 5 ms", f"{wake:.2f} ms", wake <= 5),
        Check("1,000 waiters: timeout overshoot p99 <= 20 ms", f"{over:.1f} ms", over <= 20),
        Check(
            "1,000 deadlines at once: timeout overshoot p99 <= 20 ms",
            f"{together:.1f} ms",
            together <= 20,
        ),
        Check(
            "1,000 waiters: connections O(locks) (<= 5 for one lock)", f"{conns:.0f}", conns <= 5
        ),
    ]


def markdown(results: dict[str, Any]) -> list[str]:
    """The report's section for this scenario ([] when it did not run)."""
    res = results.get("waiters")
    if not res:
        return []
    lines = [
        "",
        "## Many waiters on one lock, one process",
        "",
        "One default redis-py client per process, N asyncio tasks or threads on one lock "
        "(bench/waiters.py). Wake-up = a holder's acquire return - the previous holder's "
        "release call (each holder releases at once); overshoot = how long past its "
        f"{res['timeout_s']:g} s timeout a waiter gave up: *N at once*: all N start together, "
        "so all N deadlines fall together (the worst case: asyncio waiters give up together "
        "after one read of the lease's owner, threads each make a last attempt); "
        "*one among N*: N - 1 "
        "wait on while 20 probes, 50 ms apart, time out; early = waiters that gave up before "
        "their timeout; "
        "connections = the process's connections on the server, peak sampled every 5 ms.",
        "",
        "| flavour | N | wake-up p50 ms | p99 ms | overshoot, N at once: p50 ms | p99 ms | "
        "early | one among N: p50 ms | p99 ms | early | connections (peak) | RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for flavour in ("asyncio", "threads"):
        for r in res.get(flavour, []):
            if "error" in r:
                lines.append(f"| {flavour} | {r['waiters']} | {r['error']} |" + " |" * 10)
                continue
            w, t, a = r["wakeup"], r["timeout"], r["timeout_among"]
            lines.append(
                f"| {flavour} | {r['waiters']} | {w['p50_ms']:.2f} | {w['p99_ms']:.2f} | "
                f"{t['p50_ms']:.1f} | {t['p99_ms']:.1f} | {t['early']} | "
                f"{a['p50_ms']:.1f} | {a['p99_ms']:.1f} | {a['early']} | "
                f"{r['connections_peak']} | {r['rss_mb_waiting']:.0f} |"
            )
    return lines
