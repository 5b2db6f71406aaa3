"""RedLock on 3 local nodes: redlease vs pottery's Redlock vs aioredlock, in one run.

    .venv/bin/python -m bench.quorum_compare [--seconds 1] [--rounds 5] [--fairness-only]

Prints uncontended acquire+release pairs/s on 3 independent redis-servers (sync and asyncio;
the contenders of :mod:`bench.uncontended`, interleaved rounds, medians),
redlease's acquire latency (p50/p99) on 3 nodes against 1 node, and the quorum fairness run
(:func:`fairness`: critical sections per greedy process, leftover waiter registrations). Needs
the `bench` extra. :func:`scenario` is the ``quorum`` scenario of ``python -m bench`` and
:func:`fairness_checks` its rows of the targets table.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis

import redlease
from redlease.core.keys import LockKeys
from redlease.devtools.localredis import RedisServer
from redlease.quorum import NodeSet


def throughput(ports: list[int], seconds: float, rounds: int) -> dict[str, float]:
    """Uncontended pairs/s of the quorum contenders of :mod:`bench.uncontended` on ``ports``:
    interleaved rounds in rotating order (each sees the same machine), the median of each."""
    from bench.uncontended import quorum_contenders, run_contenders

    contenders = quorum_contenders(ports)
    run_contenders(contenders, seconds=seconds, reps=rounds, warmup=0.2, log=print)
    return {c.name: statistics.median(c.samples) for c in contenders if c.samples}


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


# (target, ours, theirs, ratio needed): pairs/s of bench.uncontended's quorum contenders
PAIRS = (
    ("3-node quorum asyncio >= 1.0x aioredlock", "redlease aio.Lock", "aioredlock", 1.0),
    ("3-node quorum sync >= 4x pottery Redlock", "redlease Lock", "pottery Redlock", 4.0),
)


# --- fairness: greedy processes on one quorum lock ----------------------------------------------

HOLD = 0.001  # busy-wait inside each critical section, as in bench/handoff.py


def _greedy(ports: list[int], name: str, seconds: float, conn: Any) -> None:
    """One greedy process: once every process is ready (connected, scripts loaded), acquire,
    hold ``HOLD``, release, at once again, until the window closes; sends its count of
    critical sections."""
    ns = NodeSet([redis.Redis(host="127.0.0.1", port=p) for p in ports])
    warm = redlease.Lock(ns, f"{name}-warm-{time.monotonic_ns()}", ttl=10)
    warm.acquire()
    warm.release()
    lock = redlease.Lock(ns, name, ttl=10)
    conn.send("ready")
    start = conn.recv()  # a common start time on CLOCK_MONOTONIC (shared by all processes)
    while time.monotonic() < start:
        pass
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
    conn.send(sections)


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
    pipes, procs = [], []
    for _ in range(processes):
        here, there = ctx.Pipe()
        proc = ctx.Process(target=_greedy, args=(ports, name, seconds, there))
        proc.start()
        pipes.append(here)
        procs.append(proc)
    for conn in pipes:
        conn.recv()  # ready
    start = time.monotonic() + 0.05
    for conn in pipes:
        conn.send(start)
    counts = [conn.recv() for conn in pipes]
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
    from bench.checks import Check, _rate, _ratio_check

    out = [
        _ratio_check(
            label, _rate(results, f"{ours} (3 nodes)"), _rate(results, f"{theirs} (3 nodes)"), need
        )
        for label, ours, theirs, need in PAIRS
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
    parser.add_argument("--seconds", type=float, default=1.0, help="per contender and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fairness-only", action="store_true", help="only the fairness run")
    args = parser.parse_args()
    if args.fairness_only:
        result = scenario(args.seconds, print)["fairness"]
        print(f"sections per process {result['sections']}  max/min {result['ratio']:.2f}")
        print(f"waiter registrations left per node {result['leftover_waiters']}")
        return
    servers = [RedisServer().start() for _ in range(3)]
    try:
        ports = [s.port for s in servers]
        rates = throughput(ports, args.seconds, args.rounds)
        for name, value in rates.items():
            print(f"{name:32s} {value:8.0f} pairs/s (median of {args.rounds} rounds)")
        for label, ours, theirs, _ in PAIRS:
            mine, peer = rates.get(f"{ours} (3 nodes)"), rates.get(f"{theirs} (3 nodes)")
            if mine and peer:
                print(f"{label}: {mine / peer:.2f}x")
        ns = NodeSet([redis.Redis(port=p) for p in ports])
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
