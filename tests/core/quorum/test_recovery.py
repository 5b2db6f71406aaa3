"""A RedLock set comes back by itself after a majority restart (issue 36): the restarted nodes
rejoin after ``restart_delay`` with fence counters raised to what the intact nodes hold and
their own clock's seed, however few nodes kept their data; tokens after are above every token
before, and no two handles hold at once. The strict restart mode keeps the operator's step."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time

import pytest

import redlease
import redlease.aio
from redlease import LockContention, QuorumUnavailable
from redlease.core.observe import read_view
from redlease.core.restart import OPERATOR, REJOINING
from redlease.core.view import LockView, document
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import async_wait_until, wait_until
from redlease.quorum import NodeSet

RESTART_DELAY = 2.0
TTL = 1.0
RETRY = 0.05  # how often the tests try again (a sidecar's retry period is its own)


def nodeset(servers: list[RedisServer], **options: object) -> NodeSet:
    clients = [s.client(socket_timeout=5) for s in servers]
    return NodeSet(clients, node_timeout=0.5, restart_delay=RESTART_DELAY, **options)  # type: ignore[arg-type]


def counts_all(lock: redlease.Lock, ns: NodeSet) -> bool:
    """One read of ``lock`` through ``ns``; whether ``ns`` then counts every node."""
    with contextlib.suppress(redlease.LockError):
        lock.state()
    return ns.health()["healthy"] == ns.health()["total"]


def view_of(servers: list[RedisServer], name: str, strict: bool = False) -> LockView:
    """What `redlease status` and the sidecar's observer read: every node, and its marker."""

    async def read() -> LockView:
        mode = {"strict_restart": True} if strict else {}
        ns = NodeSet.from_urls(
            [s.url for s in servers], asyncio=True, restart_delay=RESTART_DELAY, **mode
        )
        try:
            return await read_view(ns, [name], ns.quorum, 3.0)
        finally:
            for c in ns.clients:
                await c.aclose()

    return asyncio.run(read())


def tokens_before(lock: redlease.Lock, rounds: int = 3) -> list[int]:
    out = []
    for _ in range(rounds):
        out.append(lock.acquire().fencing_token)
        lock.release()
    return out


def lead_again(locks: list[redlease.Lock], since: float) -> tuple[redlease.Lock, int, float]:
    """Both handles (two clients of the set) try every RETRY seconds until one holds: the
    holder, its token and the seconds since ``since``. The other must then be refused."""
    won: list[tuple[redlease.Lock, int]] = []

    def one_holds() -> bool:
        for lock in locks:
            try:
                lease = lock.acquire(blocking=False)
            except (QuorumUnavailable, LockContention):
                continue
            if lease is not None:
                won.append((lock, lease.fencing_token))
                return True
        return False

    wait_until(one_holds, timeout=RESTART_DELAY + 20, step=RETRY)
    elapsed = time.monotonic() - since
    holder, token = won[0]
    for other in locks:
        if other is not holder:
            with pytest.raises(LockContention):  # no two holders
                other.acquire(blocking=False)
    return holder, token, elapsed


def refusal(lock: redlease.Lock) -> str:
    """Why an acquire is refused as an outage ('' if it was not)."""
    try:
        lock.acquire(blocking=False)
    except QuorumUnavailable as exc:
        return str(exc)
    lock.release()
    return ""


def restore(server: RedisServer, backup: str) -> None:
    """Put the AOF of ``backup`` (a copy of the server's work directory) back in place."""
    for item in ("appendonlydir", "appendonly.aof"):  # Redis 7+ / 6.2 layouts
        live, old = server.workdir / item, server.workdir.parent / backup / item
        if live.is_dir():
            shutil.rmtree(live)
        live.unlink(missing_ok=True)
        if old.is_dir():
            shutil.copytree(old, live)
        elif old.is_file():
            shutil.copy2(old, live)


def test_three_of_five_restarted_from_aof_rejoin_by_themselves(
    durable_nodes: list[RedisServer], lock_name: str
) -> None:
    """The outage of the issue: 2 of 5 killed (it keeps leading), a 3rd (it steps down), the
    three restarted from their AOF. Fails on the rule before issue 36 ('cannot rejoin by
    itself: 2 of 5 nodes kept their data, 3 needed')."""
    sets = [nodeset(durable_nodes), nodeset(durable_nodes)]
    locks = [redlease.Lock(ns, lock_name, ttl=TTL) for ns in sets]
    before = tokens_before(locks[0])
    for s in durable_nodes[:2]:
        s.kill()
    before += tokens_before(locks[1])  # still leads on 3 of 5
    durable_nodes[2].kill()
    with pytest.raises(QuorumUnavailable):
        locks[0].acquire(blocking=False)
    restarted = time.monotonic()
    for s in durable_nodes[:3]:
        s.start()
    lost = {s.address for s in durable_nodes[:3]}

    # meanwhile every surface says when they come back by themselves
    view = view_of(durable_nodes, lock_name)
    assert set(view.outside) == lost
    assert {o.kind for o in view.outside.values()} == {REJOINING}
    assert all("rejoins by itself in" in o.why for o in view.outside.values())
    assert all("earlier server run" in o.why for o in view.outside.values())
    assert document(view)["holder_unknown"]
    wait_until(lambda: "rejoins by itself in" in refusal(locks[0]), timeout=10, step=RETRY)

    holder, token, elapsed = lead_again(locks, restarted)
    assert elapsed >= RESTART_DELAY  # not before their forgotten leases could expire
    assert token > max(before)
    holder.release()
    after = [token, *tokens_before(locks[1])]
    assert min(after) > max(before) and after == sorted(set(after))
    # the other set counts all five again by itself, once its own reads find them rejoined:
    # each poll reads (a node late with one answer on a busy machine is seen at the next read;
    # health() alone only reports what the last read saw)
    wait_until(lambda: counts_all(locks[1], sets[1]), timeout=30, step=RETRY)
    assert view_of(durable_nodes, lock_name).nodes.healthy == 5
    for ns in sets:
        ns.close()


def test_all_five_restarted_from_aof_at_once(
    durable_nodes: list[RedisServer], lock_name: str
) -> None:
    sets = [nodeset(durable_nodes), nodeset(durable_nodes)]
    locks = [redlease.Lock(ns, lock_name, ttl=TTL) for ns in sets]
    before = tokens_before(locks[0])
    held = locks[1].acquire().fencing_token  # held across the outage
    before.append(held)
    for s in durable_nodes:
        s.kill()
    restarted = time.monotonic()
    for s in durable_nodes:
        s.start()
    view = view_of(durable_nodes, lock_name)
    assert {o.kind for o in view.outside.values()} == {REJOINING} and len(view.outside) == 5
    holder, token, _ = lead_again(locks, restarted)
    assert token > max(before)
    holder.release()
    for ns in sets:
        ns.close()


@pytest.mark.parametrize("redis_nodes", [5], indirect=True)
def test_three_of_five_restarted_empty_rejoin_by_themselves(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    sets = [nodeset(redis_nodes), nodeset(redis_nodes)]
    locks = [redlease.Lock(ns, lock_name, ttl=TTL) for ns in sets]
    before = tokens_before(locks[0]) + tokens_before(locks[1])
    restarted = time.monotonic()
    for s in redis_nodes[:3]:
        s.restart()  # no persistence: leases and fence counters gone
    view = view_of(redis_nodes, lock_name)
    assert {o.kind for o in view.outside.values()} == {REJOINING}
    assert all("restarted without its data" in o.why for o in view.outside.values())
    holder, token, elapsed = lead_again(locks, restarted)
    assert elapsed >= RESTART_DELAY
    assert token > max(before)
    holder.release()
    assert min(tokens_before(locks[1])) > max(before)
    for ns in sets:
        ns.close()


@pytest.mark.parametrize("durable_nodes", [3], indirect=True)
def test_every_node_restored_from_an_older_backup_issues_no_token_again(
    durable_nodes: list[RedisServer], lock_name: str
) -> None:
    """Every node restored from a backup taken two tokens ago: their counters are behind and
    their markers name earlier runs. Before issue 36 the set looked brand new and counted the
    old counters on at once (the next token was one issued before); now it rejoins by the
    restart rule, re-seeded from the clock."""
    ns = nodeset(durable_nodes)
    lock = redlease.Lock(ns, lock_name, ttl=TTL)
    before = tokens_before(lock, 2)
    for s in durable_nodes:
        shutil.copytree(
            s.workdir,
            s.workdir.parent / f"{s.workdir.name}-old",
            ignore=shutil.ignore_patterns("*.log"),
        )
    before += tokens_before(lock, 3)
    for s in durable_nodes:
        s.kill()
        restore(s, f"{s.workdir.name}-old")
        s.start()
    restarted = time.monotonic()
    holder, token, _ = lead_again([lock], restarted)
    assert token > max(before)
    holder.release()
    ns.close()


@pytest.mark.parametrize("redis_nodes", [5], indirect=True)
def test_mixed_intact_empty_and_restored_nodes(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    """One node intact, two restarted empty, two restored from an older snapshot (their
    counters behind): every token after is above every token before."""
    ns = nodeset(redis_nodes)
    lock = redlease.Lock(ns, lock_name, ttl=TTL)
    before = tokens_before(lock, 2)
    snapshot = {}
    for s in redis_nodes[3:]:
        c = s.client()
        snapshot[s.address] = c.get(f"redlease:{{{lock_name}}}:fence")
        c.close()
    before += tokens_before(lock, 3)
    for s in redis_nodes[1:]:
        s.restart()
    for s in redis_nodes[3:]:  # what a restore from an older backup leaves: old counter, old marker
        c = s.client()
        c.set(f"redlease:{{{lock_name}}}:fence", snapshot[s.address])
        c.hset("redlease:node", "run_id", "0" * 40)
        c.close()
    holder, token, _ = lead_again([lock], time.monotonic())
    assert token > max(before)
    holder.release()
    after = tokens_before(lock, 3)
    assert min(after) > max(before) and after == sorted(after)
    ns.close()


def test_strict_mode_keeps_the_operators_step(
    durable_nodes: list[RedisServer], lock_name: str
) -> None:
    """``strict_restart=True``: 2 intact nodes of 5 cannot re-seed 3, so they stay out past
    restart_delay until an operator vouches for them (docs/quorum.md, 'Bringing nodes back')."""
    ns = nodeset(durable_nodes, strict_restart=True)
    lock = redlease.Lock(ns, lock_name, ttl=TTL)
    before = tokens_before(lock)
    for s in durable_nodes[:3]:
        s.kill()
        s.start()
    wait_until(
        lambda: all(
            float(s.client().info("server")["uptime_in_seconds"]) > RESTART_DELAY
            for s in durable_nodes[:3]
        ),
        timeout=RESTART_DELAY + 10,
        step=0.1,
    )
    wanted = "cannot rejoin by itself: 2 of 5 nodes kept their data, 3 needed"
    wait_until(lambda: wanted in refusal(lock), timeout=10, step=RETRY)
    view = view_of(durable_nodes, lock_name, strict=True)
    assert {o.kind for o in view.outside.values()} == {OPERATOR}
    assert "HSET redlease:node run_id" in next(iter(view.outside.values())).action
    # the same set read without the option rejoins them by itself
    assert {o.kind for o in view_of(durable_nodes, lock_name).outside.values()} == {REJOINING}
    for s in durable_nodes[:3]:
        c = s.client()
        c.hset("redlease:node", "run_id", c.info("server")["run_id"])
        c.close()
    wait_until(lambda: _holds(lock), timeout=10, step=RETRY)
    assert lock.lease().fencing_token > max(before)  # type: ignore[union-attr]
    lock.release()
    ns.close()


def _holds(lock: redlease.Lock) -> bool:
    try:
        return lock.acquire(blocking=False) is not None
    except (QuorumUnavailable, LockContention):
        return False


def test_strict_restart_must_be_a_bool(redis_nodes: list[RedisServer]) -> None:
    with pytest.raises(redlease.ConfigError, match="strict_restart"):
        nodeset(redis_nodes, strict_restart="yes")


@pytest.mark.parametrize("redis_nodes", [5], indirect=True)
async def test_asyncio_three_of_five_restarted_empty(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    ns = NodeSet.from_urls(
        [s.url for s in redis_nodes], asyncio=True, restart_delay=RESTART_DELAY, node_timeout=0.5
    )
    lock = redlease.aio.Lock(ns, lock_name, ttl=TTL)
    before = []
    for _ in range(3):
        before.append((await lock.acquire()).fencing_token)
        await lock.release()
    for s in redis_nodes[:3]:
        s.restart()

    async def holds() -> bool:
        try:
            return await lock.acquire(blocking=False) is not None
        except (QuorumUnavailable, LockContention):
            return False

    await async_wait_until(holds, timeout=RESTART_DELAY + 20, step=RETRY)
    assert lock.lease().fencing_token > max(before)  # type: ignore[union-attr]
    await lock.release()

    async def counts_all_five() -> bool:  # a read each poll (as counts_all: health() alone
        with contextlib.suppress(redlease.LockError):  # reports only what the last read saw,
            await lock.state()  # and a restarted node late on a busy machine is seen next)
        return bool(ns.health()["healthy"] == 5)

    await async_wait_until(counts_all_five, timeout=30, step=RETRY)
    await ns.aclose()
    for c in ns.clients:
        await c.aclose()
