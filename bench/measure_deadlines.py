"""Measure how long each lock operation takes to return against a hung or refusing Redis, per
form (issue 35: "deadlines own the I/O"; docs/safety.md has the table).

Run: .venv/bin/python -m bench.measure_deadlines [FORM ...]   (FORM: node cluster sentinel
redlock; default all)

Each form runs blocking and asyncio, with redis-py's own clients and their defaults (5 s socket
timeouts, retries with back-off), as the README builds them; TTL 5 s. "hung": every server the
form uses SIGSTOPped (a Redis Cluster: every node; Sentinel: the master and every Sentinel;
RedLock: every node), a fresh start per operation so each is measured alone (the lock's
connections kept from a call made before the pause); "hung, new client": the same with a client
that made no request yet (a cluster client has read its slot map), so the connect, a
Sentinel's master lookup, an asyncio cluster's first slot-map read, a RedLock set's first
contact are measured. "refused": the data servers killed (the
Sentinels left running: they still name the dead master), every operation in turn. The
operations: ``acquire(timeout=1)`` and ``acquire()`` on a free lock, ``state()``, ``extend()``
and ``release()`` of a lease taken before the fault. Prints one Markdown row per form, flavour
and fault: seconds to return, and what it returned.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.sentinel import Sentinel

import redlease
import redlease.aio
from redlease.devtools.localcluster import LocalCluster
from redlease.devtools.localredis import RedisServer
from redlease.devtools.localsentinel import SentinelDeployment
from redlease.devtools.polling import wait_until
from redlease.quorum import NodeSet

TTL = 5.0
CAP = 30.0  # seconds an operation is waited for before it is reported as hung
OPS = ("acquire(timeout=1)", "acquire()", "state()", "extend()", "release()")


@dataclass
class Form:
    """One way to reach Redis: clients of both flavours, what to pause, what to kill."""

    name: str
    sync: Callable[[], Any]
    aio: Callable[[], Any]
    hung: list[RedisServer]
    dead: list[RedisServer]
    stop: Callable[[], None]
    settle: Callable[[], None] = lambda: None  # wait until it serves again after a pause


@contextmanager
def paused(servers: list[RedisServer]) -> Iterator[None]:
    for s in servers:
        s.pause()
    try:
        yield
    finally:
        for s in servers:
            s.resume()


def outcome(call: Callable[[], Any]) -> tuple[float, str]:
    """Seconds ``call()`` took and what it returned; ``inf`` when it had not returned after
    :data:`CAP` (it runs in a thread of its own, left behind)."""
    found: list[tuple[float, str]] = []

    def run() -> None:
        start = time.monotonic()
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - measured, named
            found.append((time.monotonic() - start, type(exc).__name__))
        else:
            found.append((time.monotonic() - start, "ok"))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(CAP)
    return found[0] if found else (float("inf"), "hung")


async def aoutcome(call: Callable[[], Awaitable[Any]]) -> tuple[float, str]:
    """:func:`outcome` for a coroutine (cancelled after :data:`CAP`)."""
    start = time.monotonic()
    try:
        async with asyncio.timeout(CAP):
            await call()
    except TimeoutError:
        return float("inf"), "hung"
    except Exception as exc:  # noqa: BLE001 - measured, named
        return time.monotonic() - start, type(exc).__name__
    return time.monotonic() - start, "ok"


def calls(free: Any, held: Any) -> dict[str, Callable[[], Any]]:
    return {
        "acquire(timeout=1)": lambda: free.acquire(timeout=1),
        "acquire()": free.acquire,
        "state()": free.state,
        "extend()": held.extend,
        "release()": held.release,
    }


def sync_hung(form: Form, op: str, n: int, fresh: bool = False) -> tuple[float, str]:
    """``op`` against the paused form; ``fresh``: on a client that made no request yet (a
    cluster client has read its slot map at its construction, before the pause)."""
    form.settle()
    client = form.sync()
    free = redlease.Lock(client, f"free-{n}-{fresh}", ttl=TTL)
    held = redlease.Lock(client, f"held-{n}", ttl=TTL)
    if not fresh:
        free.state()
        held.acquire()
    with paused(form.hung):
        result = outcome(calls(free, held)[op])
    client.close()
    return result


async def aio_hung(form: Form, op: str, n: int, fresh: bool = False) -> tuple[float, str]:
    """:func:`sync_hung` for the asyncio flavour."""
    form.settle()
    client = form.aio()
    free = redlease.aio.Lock(client, f"afree-{n}-{fresh}", ttl=TTL)
    held = redlease.aio.Lock(client, f"aheld-{n}", ttl=TTL)
    if not fresh:
        await free.state()
        await held.acquire()
    with paused(form.hung):
        result = await aoutcome(calls(free, held)[op])
    await client.aclose()
    return result


FRESH = OPS[:3]  # what a client with no connection yet is measured on (no lease to extend)


def refused(form: Form) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    form.settle()
    client, aclient = form.sync(), form.aio()

    async def before() -> tuple[Any, Any]:
        free = redlease.aio.Lock(aclient, "afree-r", ttl=TTL)
        held = redlease.aio.Lock(aclient, "aheld-r", ttl=TTL)
        await free.state()
        await held.acquire()
        return free, held

    async def after(free: Any, held: Any) -> list[tuple[float, str]]:
        found = [await aoutcome(c) for c in calls(free, held).values()]
        await aclient.aclose()
        return found

    loop = asyncio.new_event_loop()
    free, held = redlease.Lock(client, "free-r", ttl=TTL), redlease.Lock(client, "held-r", ttl=TTL)
    free.state()
    held.acquire()
    afree, aheld = loop.run_until_complete(before())
    for s in form.dead:
        s.kill()
    sync = [outcome(c) for c in calls(free, held).values()]
    aio = loop.run_until_complete(after(afree, aheld))
    loop.close()
    client.close()
    return sync, aio


def _cell(seconds: float, what: str) -> str:
    if seconds < 0:
        return "—"
    if seconds == float("inf"):
        return f"> {CAP:g} s ({what})"
    return f"{seconds:.2f} s {what}" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms {what}"


def row(form: str, flavour: str, fault: str, results: list[tuple[float, str]]) -> str:
    cells = " | ".join(_cell(t, what) for t, what in results)
    return f"| {form} | {flavour} | {fault} | {cells} |"


def measure(form: Form) -> list[str]:
    rows = []
    sync = [sync_hung(form, op, i) for i, op in enumerate(OPS)]
    rows.append(row(form.name, "blocking", "hung", sync))
    aio = [asyncio.run(aio_hung(form, op, i)) for i, op in enumerate(OPS)]
    rows.append(row(form.name, "asyncio", "hung", aio))
    skip = [(-1.0, "")] * (len(OPS) - len(FRESH))
    sync = [sync_hung(form, op, i, fresh=True) for i, op in enumerate(FRESH)]
    rows.append(row(form.name, "blocking", "hung, new client", sync + skip))
    aio = [asyncio.run(aio_hung(form, op, i, fresh=True)) for i, op in enumerate(FRESH)]
    rows.append(row(form.name, "asyncio", "hung, new client", aio + skip))
    rsync, raio = refused(form)
    rows.append(row(form.name, "blocking", "refused", rsync))
    rows.append(row(form.name, "asyncio", "refused", raio))
    return rows


def node_form() -> Form:
    server = RedisServer().start()
    return Form(
        "one node",
        lambda: redis.Redis(port=server.port),
        lambda: aioredis.Redis(port=server.port),
        [server],
        [server],
        server.stop,
    )


def cluster_form() -> Form:
    cluster = LocalCluster().start()
    host, port = cluster.startup_nodes[0]
    return Form(
        "Redis Cluster",
        cluster.client,
        lambda: AsyncRedisCluster(host=host, port=port),
        cluster.everyone,
        cluster.everyone,
        cluster.stop,
        # paused past its node timeout, the cluster says CLUSTERDOWN for a moment after
        lambda: wait_until(lambda: cluster._info_has("cluster_state:ok"), timeout=30),
    )


def sentinel_form() -> Form:
    d = SentinelDeployment(replicas=1, down_after_ms=600_000, failover_timeout_ms=600_000).start()
    hosts = [("127.0.0.1", s.port) for s in d.sentinel_servers]
    assert d.master is not None
    return Form(
        "Sentinel",
        lambda: Sentinel(hosts).master_for(d.service),
        lambda: AsyncSentinel(hosts).master_for(d.service),
        [d.master, *d.sentinel_servers],
        [d.master],
        d.stop,
    )


def redlock_form() -> Form:
    servers = [RedisServer().start() for _ in range(3)]

    def stop() -> None:
        for s in servers:
            s.stop()

    return Form(
        "RedLock, 3 nodes",
        lambda: NodeSet([redis.Redis(port=s.port) for s in servers]),
        lambda: NodeSet([aioredis.Redis(port=s.port) for s in servers]),
        servers,
        servers,
        stop,
    )


FORMS = {"node": node_form, "cluster": cluster_form, "sentinel": sentinel_form,
         "redlock": redlock_form}  # fmt: skip


def main(argv: list[str]) -> None:
    chosen = argv or list(FORMS)
    print(f"| form | flavour | server | {' | '.join(OPS)} |")
    print("|---|---|---|" + "---|" * len(OPS))
    for name in chosen:
        form = FORMS[name]()
        try:
            for line in measure(form):
                print(line, flush=True)
        finally:
            form.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
