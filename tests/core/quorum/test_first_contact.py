"""First contact: many processes start on a brand-new node set at the same instant.

Every process must acquire within its timeout: none may find some nodes already marked by
another process and the rest not yet, and then refuse the unmarked ones as "restarted without
their data" (which locked a process out for ``restart_delay``). Each round starts brand-new
redis-servers; the worker processes (half blocking, half asyncio) are started once and released
together by a barrier for every round.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import wait_until
from redlease.quorum import NodeSet

PROCESSES = 8
# Each process's acquire timeout. Contention among 8 usually takes milliseconds; a waiter that
# misses its wake-up token falls back to one BLPOP step (4 s with socket_timeout 5).
TIMEOUT = 20.0
LOCK = "first-contact"

Outcome = tuple[bool, float, Any]  # acquired?, seconds, fencing token or the error


def _round_sync(ports: list[int], barrier: Any) -> Outcome:
    ns = NodeSet([redis.Redis(port=p, socket_timeout=5) for p in ports])
    lock = redlease.Lock(ns, LOCK, ttl=5)
    barrier.wait()
    start = time.monotonic()
    try:
        lease = lock.acquire(timeout=TIMEOUT)
    except redlease.LockError as exc:
        return False, time.monotonic() - start, f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - start
    lock.release()
    ns.close()
    return True, took, lease.fencing_token


async def _round_async(ports: list[int], barrier: Any) -> Outcome:
    clients = [aioredis.Redis(port=p, socket_timeout=5) for p in ports]
    ns = NodeSet(clients)
    lock = redlease.aio.Lock(ns, LOCK, ttl=5)
    barrier.wait()  # blocks the loop on purpose: nothing else runs in this process yet
    start = time.monotonic()
    try:
        lease = await lock.acquire(timeout=TIMEOUT)
    except redlease.LockError as exc:
        return False, time.monotonic() - start, f"{type(exc).__name__}: {exc}"
    took = time.monotonic() - start
    await lock.release()
    await ns.aclose()
    for c in clients:
        await c.aclose()
    return True, took, lease.fencing_token


def _worker(wid: int, use_asyncio: bool, jobs: Any, results: Any, barrier: Any) -> None:
    """One process: for every round, a new node set, then wait at the barrier and acquire."""
    while True:
        job = jobs.get()
        if job is None:
            return
        rnd, ports = job
        try:
            if use_asyncio:
                out = asyncio.run(_round_async(ports, barrier))
            else:
                out = _round_sync(ports, barrier)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out = (False, 0.0, f"worker crashed: {exc!r}")
        results.put((wid, rnd, *out))


@pytest.fixture
def workers() -> Iterator[tuple[list[Any], Any, Any]]:
    ctx = mp.get_context("spawn")  # independent interpreters, as separate pods would be
    barrier = ctx.Barrier(PROCESSES + 1)
    results = ctx.Queue()
    jobs = [ctx.Queue() for _ in range(PROCESSES)]
    procs = [
        ctx.Process(target=_worker, args=(w, w % 2 == 1, jobs[w], results, barrier), daemon=True)
        for w in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        yield jobs, results, barrier
    finally:
        for q in jobs:
            q.put(None)
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()


def first_contact_rounds(workers: tuple[list[Any], Any, Any], nodes: int, rounds: int) -> float:
    """Run ``rounds`` rounds on ``nodes`` brand-new servers; return the worst acquire time."""
    jobs, results, barrier = workers
    worst = 0.0
    failures = []
    for rnd in range(rounds):
        servers = [RedisServer().start() for _ in range(nodes)]
        try:
            for q in jobs:
                q.put((rnd, [s.port for s in servers]))
            barrier.wait(timeout=60)  # every process is ready: release them together
            got = [results.get(timeout=60) for _ in range(PROCESSES)]
        finally:
            for s in servers:
                s.stop()
        tokens = []
        for wid, r, ok, took, value in got:
            assert r == rnd
            if ok:
                worst = max(worst, took)
                tokens.append(value)
            else:
                failures.append(f"round {rnd}, process {wid} after {took:.2f}s: {value}")
        assert len(set(tokens)) == len(tokens), f"round {rnd}: duplicate fencing tokens {tokens}"
    assert not failures, "\n".join(failures)
    print(f"first contact: {rounds} rounds x {PROCESSES} processes on {nodes} nodes, "
          f"worst acquire {worst:.3f}s")  # fmt: skip
    return worst


@pytest.mark.parametrize("nodes", [3, 5])
def test_first_contact_quick(workers: tuple[list[Any], Any, Any], nodes: int) -> None:
    first_contact_rounds(workers, nodes, rounds=3)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("nodes", [3, 5])
def test_first_contact_many_rounds(workers: tuple[list[Any], Any, Any], nodes: int) -> None:
    first_contact_rounds(workers, nodes, rounds=20)


# --- a set whose marking was interrupted ----------------------------------------------------------


def _run_id(server: RedisServer) -> str:
    c = server.client()
    try:
        return str(c.info("server")["run_id"])
    finally:
        c.close()


def _marker(server: RedisServer) -> list[bytes | None]:
    c = server.client()
    try:
        return c.hmget("redlease:node", "run_id", "born")  # type: ignore[return-value]
    finally:
        c.close()


def _mark_first_only(servers: list[RedisServer]) -> str:
    """What a client that crashed while marking a brand-new set leaves: one node marked."""
    runs = [_run_id(s) for s in servers]
    born = " ".join(sorted(runs))
    c = servers[0].client()
    c.hset("redlease:node", mapping={"run_id": runs[0], "born": born})
    c.close()
    return born


def test_interrupted_marking_is_completed(redis_nodes: list[RedisServer]) -> None:
    born = _mark_first_only(redis_nodes)
    ns = NodeSet([s.client() for s in redis_nodes])  # restart_delay 60 s
    lock = redlease.Lock(ns, "interrupted", ttl=5)
    lock.acquire(blocking=False)  # the unmarked nodes are on the birth list: they count now
    lock.release()
    assert ns.health() == {"total": 3, "healthy": 3, "quorum": 2}
    for s in redis_nodes:
        assert _marker(s) == [_run_id(s).encode(), born.encode()]
    ns.close()


def test_restarted_node_is_not_on_the_birth_list(redis_nodes: list[RedisServer]) -> None:
    """The same, but one unmarked node restarted (without data) before anybody marked it: it
    runs a new server, which the birth list does not name, so it waits out the restart rule."""
    _mark_first_only(redis_nodes)
    redis_nodes[2].restart()
    ns = NodeSet([s.client() for s in redis_nodes])  # restart_delay 60 s
    lock = redlease.Lock(ns, "interrupted", ttl=0.5)
    lock.acquire(blocking=False)  # nodes 0 and 1 form the quorum
    lock.release()
    assert ns.health()["healthy"] == 2
    assert _marker(redis_nodes[2]) == [None, None]
    ns.close()

    ns = NodeSet([s.client() for s in redis_nodes], restart_delay=1.0)
    lock = redlease.Lock(ns, "interrupted", ttl=0.5)

    def rejoined() -> bool:  # after restart_delay, re-seeded from the two intact nodes
        lock.acquire(blocking=False)
        lock.release()
        return ns.health()["healthy"] == 3

    wait_until(rejoined, timeout=10)
    assert _marker(redis_nodes[2])[0] == _run_id(redis_nodes[2]).encode()
    ns.close()
