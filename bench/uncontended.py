"""Uncontended acquire+release pairs/s: redlease against its peers, sync, asyncio and quorum.

Each contender is measured for a fixed time slice per repetition; repetitions are interleaved
(every contender once per round, rotating order) and the median is reported.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis

import redlease
from bench import reference, stats
from redlease import aio
from redlease.devtools.localredis import RedisServer

Pair = Callable[[], Any]


@dataclass
class Contender:
    """One library in one scenario. ``build`` returns an (acquire, release) pair of callables.

    For asyncio contenders both callables return awaitables; ``close`` frees clients.
    """

    name: str
    group: str  # "sync" | "asyncio" | "quorum"
    build: Callable[[], Any]
    is_async: bool = False
    ours: bool = False
    skipped: str | None = None
    samples: list[float] = field(default_factory=list)
    exec_us: list[float] = field(default_factory=list)  # Redis execution time per pair
    cpu_us: list[float] = field(default_factory=list)  # Redis CPU time per pair
    client_cpu_us: list[float] = field(default_factory=list)  # this process's CPU per pair
    blocks: list[float] = field(default_factory=list)  # times this process slept, per pair
    _ops: Any = None
    _closers: list[Callable[[], Any]] = field(default_factory=list)


def _time_sync(acquire: Pair, release: Pair, seconds: float) -> tuple[int, float]:
    """Pairs done and seconds taken, looping for at least ``seconds``."""
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        acquire()
        release()
        n += 1
        now = time.perf_counter()
        if now >= end:
            return n, now - start


async def _time_async(
    acquire: Callable[[], Awaitable[Any]], release: Callable[[], Awaitable[Any]], seconds: float
) -> tuple[int, float]:
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        await acquire()
        await release()
        n += 1
        now = time.perf_counter()
        if now >= end:
            return n, now - start


# --- the contenders ------------------------------------------------------------------------------


def _redlease_sync(client: Any, name: str) -> tuple[Pair, Pair]:
    lock = redlease.Lock(client, name, ttl=10)
    return lock.acquire, lock.release


def _redispy_sync(client: redis.Redis, name: str) -> tuple[Pair, Pair]:
    lock = client.lock(name, timeout=10)
    return lock.acquire, lock.release


def _python_redis_lock(client: redis.Redis, name: str) -> tuple[Pair, Pair]:
    import redis_lock  # type: ignore[import-untyped]

    lock = redis_lock.Lock(client, name, expire=10)
    return lock.acquire, lock.release


def _pottery(clients: list[redis.Redis], name: str) -> tuple[Pair, Pair]:
    from pottery import Redlock

    lock = Redlock(key=name, masters=set(clients), auto_release_time=10)
    return lock.acquire, lock.release


def _aioredlock(ports: list[int], name: str) -> tuple[Pair, Pair, Pair]:
    from aioredlock import Aioredlock  # type: ignore[import-untyped]

    mgr = Aioredlock([{"host": "127.0.0.1", "port": p} for p in ports])
    held: list[Any] = []

    async def acquire() -> None:
        held.append(await mgr.lock(name, lock_timeout=10))

    async def release() -> None:
        await mgr.unlock(held.pop())

    return acquire, release, mgr.destroy


def _node_set(clients: list[Any]) -> Any:
    from redlease.quorum import NodeSet  # type: ignore[import-not-found,unused-ignore]

    return NodeSet(clients)


def sync_async_contenders(port: int) -> list[Contender]:
    """Single-node contenders (one redis-server on ``port``)."""

    def sync_client() -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port)

    def async_client() -> aioredis.Redis:
        return aioredis.Redis(host="127.0.0.1", port=port)

    def redlease_async() -> tuple[Any, Any]:
        lock = aio.Lock(async_client(), "u-rl-aio", ttl=10)
        return lock.acquire, lock.release

    def redispy_async() -> tuple[Any, Any]:
        lock = async_client().lock("u-rp-aio", timeout=10)
        return lock.acquire, lock.release

    return [
        Contender(
            "redlease Lock", "sync", lambda: _redlease_sync(sync_client(), "u-rl"), ours=True
        ),
        Contender("redis-py Lock", "sync", lambda: _redispy_sync(sync_client(), "u-rp")),
        Contender("python-redis-lock", "sync", lambda: _python_redis_lock(sync_client(), "u-prl")),
        Contender("pottery Redlock (1 node)", "sync", lambda: _pottery([sync_client()], "u-pot")),
        Contender("redlease aio.Lock", "asyncio", redlease_async, is_async=True, ours=True),
        Contender("redis.asyncio Lock", "asyncio", redispy_async, is_async=True),
        Contender(
            "aioredlock (1 node)", "asyncio", lambda: _aioredlock([port], "u-arl"), is_async=True
        ),
    ]


def quorum_contenders(ports: list[int]) -> list[Contender]:
    """3-node RedLock contenders (independent servers on ``ports``)."""

    def redlease_sync() -> tuple[Pair, Pair]:
        clients = [redis.Redis(host="127.0.0.1", port=p) for p in ports]
        return _redlease_sync(_node_set(clients), "q-rl")

    def redlease_async() -> tuple[Any, Any]:
        clients = [aioredis.Redis(host="127.0.0.1", port=p) for p in ports]
        lock = aio.Lock(_node_set(clients), "q-rl-aio", ttl=10)
        return lock.acquire, lock.release

    def pottery() -> tuple[Pair, Pair]:
        return _pottery([redis.Redis(host="127.0.0.1", port=p) for p in ports], "q-pot")

    n = len(ports)
    return [
        Contender(f"redlease Lock ({n} nodes)", "quorum", redlease_sync, ours=True),
        Contender(
            f"redlease aio.Lock ({n} nodes)", "quorum", redlease_async, is_async=True, ours=True
        ),
        Contender(f"pottery Redlock ({n} nodes)", "quorum", pottery),
        Contender(
            f"aioredlock ({n} nodes)", "quorum", lambda: _aioredlock(ports, "q-arl"), is_async=True
        ),
    ]


# --- running -------------------------------------------------------------------------------------


def _setup(c: Contender, runner: asyncio.Runner) -> None:
    """Build the contender and run a few pairs (connections, script loading); skip on error."""
    try:
        ops = c.build()
        acquire, release = ops[0], ops[1]
        if len(ops) > 2:
            c._closers.append(ops[2])
        if c.is_async:
            runner.run(_time_async(acquire, release, 0.05))
        else:
            _time_sync(acquire, release, 0.05)
        c._ops = (acquire, release)
    except ImportError as exc:
        c.skipped = f"skipped: {exc.name or exc} unavailable"
    except Exception as exc:  # noqa: BLE001 - a broken contender must not sink the whole run
        c.skipped = f"skipped: {type(exc).__name__}: {str(exc)[:120]}"


def exec_usec(clients: list[redis.Redis]) -> float:
    """Microseconds the servers spent executing commands since the last CONFIG RESETSTAT
    (``INFO commandstats``; a script's time includes the commands it calls, which count once
    more on their own: the measure the performance targets were set with)."""
    total = 0.0
    for client in clients:
        for name, st in client.info("commandstats").items():
            if not name.startswith(("cmdstat_config", "cmdstat_info")):
                total += float(st["usec"])
    return total


def server_cpu_us(clients: list[redis.Redis]) -> float:
    """CPU time (user + system, us) the servers' main threads have used so far: the whole cost
    of the pairs to Redis, reading and writing the sockets included."""
    total = 0.0
    for client in clients:
        cpu = client.info("cpu")
        user = cpu.get("used_cpu_user_main_thread", cpu["used_cpu_user"])
        system = cpu.get("used_cpu_sys_main_thread", cpu["used_cpu_sys"])
        total += (float(user) + float(system)) * 1e6
    return total


def _measure(
    c: Contender, runner: asyncio.Runner, seconds: float, stat_clients: list[redis.Redis]
) -> float:
    """Pairs/s of one time slice; records the servers' execution and CPU time per pair too,
    and the client's own: its CPU time and how often it slept (voluntary context switches: a
    reply not there yet when the client looked; each costs a wake-up)."""
    acquire, release = c._ops
    for client in stat_clients:
        client.config_resetstat()
    cpu0 = server_cpu_us(stat_clients) if stat_clients else 0.0
    own0 = resource.getrusage(resource.RUSAGE_SELF)
    if c.is_async:
        n, took = runner.run(_time_async(acquire, release, seconds))
    else:
        n, took = _time_sync(acquire, release, seconds)
    own1 = resource.getrusage(resource.RUSAGE_SELF)
    if n:
        used = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
        c.client_cpu_us.append(used * 1e6 / n)
        c.blocks.append((own1.ru_nvcsw - own0.ru_nvcsw) / n)
    if stat_clients and n:
        c.cpu_us.append((server_cpu_us(stat_clients) - cpu0) / n)
        c.exec_us.append(exec_usec(stat_clients) / n)
    return n / took


def run_contenders(
    contenders: list[Contender],
    *,
    seconds: float,
    reps: int,
    warmup: float,
    ref_port: int | None = None,
    ref_requests: int = 0,
    stat_ports: tuple[int, ...] = (),
    log: Callable[[str], None] = print,
) -> list[float]:
    """Measure every contender ``reps`` times, interleaved; returns reference samples.

    When ``ref_port`` is given the redis-benchmark reference joins the rotation as one more
    contender, so it sees the same machine conditions.
    """
    ref_samples: list[float] = []
    stat_clients = [redis.Redis(host="127.0.0.1", port=p) for p in stat_ports]
    with asyncio.Runner() as runner:
        for c in contenders:
            _setup(c, runner)
            if c.skipped:
                log(f"  {c.name}: {c.skipped}")
            elif warmup > 0:
                _measure(c, runner, warmup, stat_clients)
                c.exec_us.clear()
                c.cpu_us.clear()
                c.client_cpu_us.clear()
                c.blocks.clear()
        live: list[Contender | None] = [c for c in contenders if not c.skipped]
        if ref_port is not None and reference.available():
            live.append(None)  # the reference's slot
        for order in stats.rotations(live, reps):
            for slot in order:
                if slot is None:
                    assert ref_port is not None
                    ref_samples.append(reference.set_rate(ref_port, ref_requests))
                else:
                    slot.samples.append(_measure(slot, runner, seconds, stat_clients))
        for c in contenders:
            for close in c._closers:
                try:
                    out = close()
                    if asyncio.iscoroutine(out):
                        runner.run(out)
                except Exception:  # noqa: BLE001, S110 - closing is best effort
                    pass
    for client in stat_clients:
        client.close()
    return ref_samples


def _median(values: list[float]) -> float:
    return stats.median(values) if values else float("nan")


def scenario(
    *,
    seconds: float,
    reps: int,
    warmup: float,
    ref_requests: int,
    quorum_nodes: int = 3,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Single-node and quorum pairs/s plus the reference, as a results.json fragment."""
    with RedisServer() as single:
        log("uncontended pairs/s, one node (sync, asyncio) ...")
        single_cs = sync_async_contenders(single.port)
        ref = run_contenders(
            single_cs, seconds=seconds, reps=reps, warmup=warmup,
            ref_port=single.port, ref_requests=ref_requests, stat_ports=(single.port,), log=log,
        )  # fmt: skip
    servers = [RedisServer().start() for _ in range(quorum_nodes)]
    try:
        log(f"uncontended pairs/s, quorum of {quorum_nodes} nodes ...")
        quorum_cs = quorum_contenders([s.port for s in servers])
        run_contenders(
            quorum_cs, seconds=seconds, reps=reps, warmup=warmup,
            stat_ports=tuple(s.port for s in servers), log=log,
        )  # fmt: skip
    finally:
        for s in servers:
            s.stop()
    ref_rate = stats.median(ref)
    rows = []
    for c in single_cs + quorum_cs:
        rate = _median(c.samples)
        rows.append(
            {
                "name": c.name,
                "group": c.group,
                "ours": c.ours,
                "pairs_per_s": rate,
                "samples": c.samples,
                "redis_exec_us_per_pair": _median(c.exec_us),
                "redis_cpu_us_per_pair": _median(c.cpu_us),
                "client_cpu_us_per_pair": _median(c.client_cpu_us),
                "client_sleeps_per_pair": _median(c.blocks),
                "ratio_to_reference": stats.ratio(rate, ref_rate),
                "skipped": c.skipped,
            }
        )
    return {
        "reference": {
            "command": "redis-benchmark -c 1 -t set",
            "requests": ref_requests,
            "set_per_s": ref_rate,
            "samples": ref,
            "available": bool(ref),
        },
        "contenders": rows,
    }
