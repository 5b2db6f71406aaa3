"""Nodes that answer but do not count (restarted empty, or from an AOF naming an earlier run),
on real RedLock sets: the library, the lock view and the rule agree, and say what to do."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable

import pytest

import redlease
import redlease.aio
from redlease import QuorumUnavailable
from redlease.core.observe import read_view
from redlease.core.restart import OPERATOR, REJOINING
from redlease.core.view import LockView, document
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until, wait_until
from redlease.quorum import NodeSet

RESTART_DELAY = 1.0


def nodeset(servers: list[RedisServer], strict: bool = False) -> NodeSet:
    clients = [s.client(socket_timeout=5) for s in servers]
    return NodeSet(clients, node_timeout=0.5, restart_delay=RESTART_DELAY, strict_restart=strict)


def view_of(servers: list[RedisServer], name: str, strict: bool = False) -> LockView:
    """What `redlease status` and the sidecar's observer read: every node, and its marker."""

    async def read() -> LockView:
        ns = NodeSet.from_urls(
            [s.url for s in servers],
            asyncio=True,
            restart_delay=RESTART_DELAY,
            strict_restart=strict,
        )
        try:
            return await read_view(ns, [name], ns.quorum, 3.0)
        finally:
            for c in ns.clients:
                await c.aclose()

    return asyncio.run(read())


def uptime(server: RedisServer) -> float:
    client = server.client()
    try:
        return float(client.info("server")["uptime_in_seconds"])
    finally:
        client.close()


def fence(server: RedisServer, name: str) -> int:
    client = server.client()
    try:
        return int(client.get(f"redlease:{{{name}}}:fence") or 0)
    finally:
        client.close()


def refusal(lock: redlease.Lock) -> str:
    """Why an acquire is refused as an outage ('' if it was not)."""
    try:
        lock.acquire(blocking=False)
    except QuorumUnavailable as exc:
        return str(exc)
    lock.release()
    return ""


def test_two_of_three_restarted_empty_are_named_and_need_an_operator(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """The strict restart mode (by default they rejoin by themselves: test_recovery.py)."""
    _, b, c = redis_nodes
    ns = nodeset(redis_nodes, strict=True)
    lock = redlease.Lock(ns, lock_name, ttl=RESTART_DELAY)
    lock.acquire()
    lock.release()
    b.restart()
    c.restart()
    wait_until(lambda: "cannot rejoin by itself" in refusal(lock), timeout=10, step=0.05)
    with pytest.raises(QuorumUnavailable) as info:
        lock.acquire(blocking=False)
    assert set(info.value.nodes) == {b.address, c.address}
    assert "rejoining" not in str(info.value)
    assert ns.health() == {"total": 3, "healthy": 1, "quorum": 2}
    assert set(ns.not_counting()) == {b.address, c.address}

    view = view_of(redis_nodes, lock_name, strict=True)
    doc = document(view)
    assert doc["nodes"] == {"total": 3, "healthy": 1, "quorum": 2}
    assert doc["holder"] is None and doc["holder_unknown"]  # unknown, never "free"
    assert set(doc["nodes_not_counting"]) == {b.address, c.address}
    assert {o.kind for o in view.outside.values()} == {OPERATOR}
    assert "DEL redlease:node" in view.outside[b.address].action

    # time does not bring them back: past restart_delay they are still out
    wait_until(lambda: min(uptime(b), uptime(c)) > RESTART_DELAY, timeout=10, step=0.05)
    with pytest.raises(QuorumUnavailable):
        lock.acquire(blocking=False)
    assert view_of(redis_nodes, lock_name, strict=True).nodes.healthy == 1

    # the operator's hand (docs/quorum.md): a new history, marked at first contact
    for server in redis_nodes:
        client = server.client()
        client.delete("redlease:node")
        client.close()
    assert view_of(redis_nodes, lock_name).nodes.healthy == 3
    wait_until(lambda: lock.acquire(blocking=False) is not None, timeout=10, step=0.05)
    lock.release()
    assert ns.health()["healthy"] == 3 and ns.not_counting() == {}
    ns.close()


def test_one_restarted_node_rejoins_by_itself(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    b = redis_nodes[1]
    ns = nodeset(redis_nodes)
    lock = redlease.Lock(ns, lock_name, ttl=RESTART_DELAY)
    first = lock.acquire().fencing_token
    b.restart()
    view = view_of(redis_nodes, lock_name)
    assert view.nodes.healthy == 2 and view.nodes.reachable
    assert view.holder is not None and view.fencing_token == first  # two intact nodes agree
    assert list(view.outside) == [b.address] and view.outside[b.address].kind == REJOINING
    assert "rejoins by itself" in view.outside[b.address].why
    lock.release()

    def rejoined() -> bool:  # the next lock operation re-seeds it after restart_delay
        lock.acquire()
        lock.release()
        return view_of(redis_nodes, lock_name).nodes.healthy == 3

    wait_until(rejoined, timeout=15, step=0.05)
    assert fence(b, lock_name) >= first  # its counter was restored before it counted
    ns.close()


@pytest.mark.parametrize("durable_nodes", [3], indirect=True)
def test_node_restored_from_an_older_aof_is_not_trusted(
    durable_nodes: list[RedisServer], lock_name: str
) -> None:
    """A node restored from an old AOF backup carries its marker of an earlier run and old
    fence counters: it stays out until it was up for restart_delay and re-seeded."""
    a = durable_nodes[0]
    ns = nodeset(durable_nodes)
    lock = redlease.Lock(ns, lock_name, ttl=RESTART_DELAY)
    tokens = []
    for _ in range(2):
        tokens.append(lock.acquire().fencing_token)
        lock.release()
    backup = a.workdir.parent / f"{a.workdir.name}-backup"
    shutil.copytree(a.workdir, backup, ignore=shutil.ignore_patterns("*.log"))
    for _ in range(3):
        tokens.append(lock.acquire().fencing_token)
        lock.release()
    a.kill()
    for item in ("appendonlydir", "appendonly.aof"):  # Redis 7+ / 6.2 layouts
        live, old = a.workdir / item, backup / item
        if live.is_dir():
            shutil.rmtree(live)
        live.unlink(missing_ok=True)
        if old.is_dir():
            shutil.copytree(old, live)
        elif old.is_file():
            shutil.copy2(old, live)
    shutil.rmtree(backup, ignore_errors=True)
    a.start()
    assert fence(a, lock_name) == tokens[1]  # the old data is back

    view = view_of(durable_nodes, lock_name)
    assert view.nodes.healthy == 2 and list(view.outside) == [a.address]
    assert "earlier server run" in view.outside[a.address].why
    assert view.outside[a.address].kind == REJOINING

    def counts() -> bool:
        tokens.append(lock.acquire().fencing_token)
        lock.release()
        return view_of(durable_nodes, lock_name).nodes.healthy == 3

    wait_until(counts, timeout=15, step=0.05)
    assert tokens == sorted(set(tokens))  # strictly increasing throughout
    assert fence(a, lock_name) >= tokens[-2]  # re-seeded before it counted
    ns.close()


async def test_asyncio_node_set_names_nodes_that_do_not_count(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    ns = NodeSet.from_urls(
        [s.url for s in redis_nodes],
        asyncio=True,
        restart_delay=RESTART_DELAY,
        node_timeout=0.5,
        strict_restart=True,
    )
    lock = redlease.aio.Lock(ns, lock_name, ttl=RESTART_DELAY)
    await lock.acquire()
    await lock.release()
    for server in redis_nodes[1:]:
        server.restart()
    lost = {s.address for s in redis_nodes[1:]}

    async def refused() -> str:
        try:
            await lock.acquire(blocking=False)
        except QuorumUnavailable as exc:
            return str(exc)
        await lock.release()
        return ""

    await async_wait_until(
        lambda: _contains(refused(), "cannot rejoin by itself"), timeout=10, step=0.05
    )
    assert ns.health() == {"total": 3, "healthy": 1, "quorum": 2}
    assert set(ns.not_counting()) == lost
    await ns.aclose()
    for c in ns.clients:
        await c.aclose()


async def _contains(text: Awaitable[str], part: str) -> bool:
    return part in await text
