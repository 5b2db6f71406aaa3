"""Contended hand-off: separate OS processes take turns on one lock, holding it 1 ms.

A pool of worker processes (spawned once, reused by every run) receives a run spec, builds the
lock of the library under test, waits for a common start time on CLOCK_MONOTONIC (shared by
all processes on Linux) and loops acquire / busy-wait 1 ms / release until the window closes.

Modes:
* ``greedy``: the releaser competes again at once;
* ``alternating``: after releasing, a process waits until another one has acquired before it
  competes again (a shared counter bumped by each new holder), so the lock must change hands.

Hand-off latency = the next holder's acquire return - the previous holder's release call.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from bench import stats

LIBRARIES = ("redlease", "redis-py", "python-redis-lock")
HOLD = 0.001


@dataclass(frozen=True)
class Spec:
    """One contended run, sent to every participating worker."""

    library: str
    mode: str  # "greedy" | "alternating"
    port: int
    name: str
    start: float  # monotonic start time, common to all workers
    seconds: float
    hold: float = HOLD


def make_lock(library: str, client: redis.Redis, name: str) -> tuple[Callable[[], Any], Any]:
    """(blocking acquire, release) of ``library`` on ``name``."""
    if library == "redlease":
        import redlease

        lock: Any = redlease.Lock(client, name, ttl=10)
        return lock.acquire, lock.release
    if library == "redis-py":
        lock = client.lock(name, timeout=10)  # default: poll every 100 ms
        return lambda: lock.acquire(blocking=True), lock.release
    if library == "python-redis-lock":
        import redis_lock  # type: ignore[import-untyped]

        lock = redis_lock.Lock(client, name, expire=10)
        return lambda: lock.acquire(blocking=True), lock.release
    raise ValueError(f"unknown library {library!r}")


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _busy(until: float) -> None:
    while time.monotonic() < until:
        pass


def run_worker(spec: Spec, gen: Any) -> list[tuple[float, float, float, float]]:
    """One contender's loop; returns (asked, got, release, done) per critical section."""
    client = redis.Redis(host="127.0.0.1", port=spec.port)
    acquire, release = make_lock(spec.library, client, spec.name)
    # warm up: connection and script loading on a private key, outside the window
    w_acq, w_rel = make_lock(spec.library, client, f"{spec.name}:warm:{id(client)}")
    w_acq()
    w_rel()
    end = spec.start + spec.seconds
    now = time.monotonic()
    if spec.start > now:
        time.sleep(max(0.0, spec.start - now - 0.002))
        _busy(spec.start)
    events = []
    alternating = spec.mode == "alternating"
    while True:
        asked = time.monotonic()
        acquire()
        got = time.monotonic()
        if alternating:
            gen.value += 1  # only the holder writes: the lock under test serialises this
            mine = gen.value
        _busy(got + spec.hold)
        rel = time.monotonic()
        release()
        done = time.monotonic()
        events.append((asked, got, rel, done))
        if done >= end:
            break
        if alternating:
            while gen.value == mine and time.monotonic() < end:
                time.sleep(0.0002)
            if time.monotonic() >= end:
                break
    client.close()
    return events


def _worker_main(conn: mpc.Connection, gen: Any) -> None:
    import redlease  # noqa: F401 - import everything before reporting ready

    with contextlib.suppress(ImportError):
        import redis_lock  # type: ignore[import-untyped,unused-ignore]  # noqa: F401
    conn.send("ready")
    while True:
        spec = conn.recv()
        if spec is None:
            return
        try:
            conn.send(("ok", run_worker(spec, gen)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class Pool:
    """``size`` spawned worker processes, reused across runs (spawning 8 Pythons is slow)."""

    def __init__(self, size: int) -> None:
        ctx = mp.get_context("spawn")
        self.gen = ctx.RawValue("q", 0)
        self.conns: list[mpc.Connection] = []
        self.procs = []
        for _ in range(size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_main, args=(child, self.gen), daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)
        for i, c in enumerate(self.conns):  # all imports done: no start-up noise in the runs
            if not c.poll(120) or c.recv() != "ready":
                raise RuntimeError(f"hand-off worker {i} did not start")

    def run(self, library: str, mode: str, procs: int, port: int, name: str, seconds: float,
            lead: float) -> list[stats.Section]:  # fmt: skip
        """One run with ``procs`` workers; ``lead`` s to build locks and warm up first."""
        self.gen.value = 0
        spec = Spec(library, mode, port, name, time.monotonic() + lead, seconds)
        for c in self.conns[:procs]:
            c.send(spec)
        sections = []
        for i, c in enumerate(self.conns[:procs]):
            if not c.poll(lead + seconds + 60):
                raise TimeoutError(f"hand-off worker {i} ({library}, {mode}) did not finish")
            status, payload = c.recv()
            if status != "ok":
                raise RuntimeError(f"hand-off worker {i} ({library}): {payload}")
            sections += [stats.Section(i, *ev) for ev in payload]
        return sections

    def close(self) -> None:
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.send(None)
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scenario(
    *,
    seconds: float,
    reps: int,
    procs: tuple[int, ...] = (2, 8),
    modes: tuple[str, ...] = ("greedy", "alternating"),
    libraries: tuple[str, ...] = LIBRARIES,
    lead: float = 0.3,
    warmup: float = 0.2,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every (library, mode, procs) combination, ``reps`` interleaved runs pooled together."""
    from redlease.devtools.localredis import RedisServer

    missing = [lib for lib in libraries if lib == "python-redis-lock" and not _has("redis_lock")]
    for lib in missing:
        log(f"  {lib}: skipped: not installed")
    libraries = tuple(lib for lib in libraries if lib not in missing)
    loads: list[float] = []
    runs: dict[tuple[str, str, int], list[tuple[list[stats.Section], float, float]]] = {}
    with RedisServer() as server, Pool(max(procs)) as pool:
        log(f"contended hand-off: {len(libraries)} libraries x {modes} x {procs} processes ...")
        configs = [(m, n) for n in procs for m in modes]
        for lib in libraries:  # warm-up runs, discarded
            pool.run(lib, "greedy", max(procs), server.port, f"warm:{lib}", warmup, lead)
        k = 0
        for rep in range(reps):
            for mode, n in configs:
                for lib in stats.rotations(list(libraries), k + 1)[k]:  # rotate the order
                    name = f"handoff:{lib}:{mode}:{n}:{rep}"
                    sections = pool.run(lib, mode, n, server.port, name, seconds, lead)
                    loads.append(os.getloadavg()[0])
                    start = min(s.got for s in sections)
                    runs.setdefault((lib, mode, n), []).append((sections, start, start + seconds))
                k += 1
    rows = []
    for (lib, mode, n), parts in runs.items():
        per = [stats.analyse_handoff(secs, a, b) for secs, a, b in parts]
        lat = [x for p in per for x in p.latencies_ms]
        bad = sum(stats.overlaps(secs) for secs, _, _ in parts)
        rows.append(
            {
                "library": lib,
                "mode": mode,
                "processes": n,
                "runs": len(per),
                "sections": sum(p.sections for p in per),
                "handoffs": len(lat),
                # per-run percentiles, median over the interleaved runs (robust to one run
                # hit by background load); pooled percentiles for reference
                "p50_ms": stats.median([p.p50_ms for p in per if p.handoffs]),
                "p99_ms": stats.median([p.p99_ms for p in per if p.handoffs]),
                "pooled_p50_ms": stats.percentile(lat, 50),
                "pooled_p99_ms": stats.percentile(lat, 99),
                "max_handoff_ms": max(lat) if lat else float("nan"),
                "worst_wait_ms": max(p.worst_wait_ms for p in per),
                "p99_wait_ms": stats.median([p.p99_wait_ms for p in per]),
                "handoffs_per_s": stats.median([p.handoffs_per_s for p in per]),
                "sections_per_s": stats.median([p.sections_per_s for p in per]),
                "overlaps": bad,
                "latencies_ms": [round(x, 3) for x in lat],
            }
        )
    order = {lib: i for i, lib in enumerate(libraries)}
    rows.sort(key=lambda r: (r["processes"], r["mode"] != "greedy", order[str(r["library"])]))
    return {
        "hold_ms": HOLD * 1000,
        "seconds_per_run": seconds,
        "reps": reps,
        "load_1min": {"median": stats.median(loads), "max": max(loads, default=float("nan"))},
        "rows": rows,
    }
