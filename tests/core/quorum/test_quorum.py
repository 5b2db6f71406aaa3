"""RedLock over real, independent redis-server processes: API, faults, fencing, no stale keys."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis

import redlease
import redlease.aio
from redlease import LockContention, LockTimeout, NotOwned, QuorumUnavailable
from redlease.core.quorum import _async, _sync
from redlease.core.quorum.channel import RETRY_CONNECT
from redlease.devtools.localredis import RedisServer
from redlease.devtools.netfault import DelayProxy as Proxy
from redlease.devtools.polling import wait_until
from redlease.quorum import NodeSet
from tests.core.quorum.conftest import lease_keys


def nodeset(servers: list[RedisServer], **kwargs: object) -> NodeSet:
    clients = [s.client(socket_timeout=5) for s in servers]
    return NodeSet(clients, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def proxies() -> Iterator[list[Proxy]]:
    made: list[Proxy] = []
    yield made
    for p in made:
        p.stop()


# --- the same API over a node set ----------------------------------------------------------------


@pytest.mark.parametrize("redis_nodes", [1, 3], indirect=True)
def test_sync_primitives(redis_nodes: list[RedisServer], lock_name: str) -> None:
    ns = nodeset(redis_nodes)
    a = redlease.Lock(ns, lock_name, ttl=5)
    b = redlease.Lock(ns, lock_name, ttl=5)
    first = a.acquire()
    with pytest.raises(LockContention):
        b.acquire(blocking=False)
    a.release()
    second = b.acquire(blocking=False)
    assert second.fencing_token > first.fencing_token
    state = b.state()
    assert state.fencing_token == second.fencing_token and state.holder
    b.release()
    with pytest.raises(NotOwned):
        b.release()

    r = redlease.ReentrantLock(ns, lock_name + "r", ttl=5)
    outer = r.acquire()
    inner = r.acquire()
    assert inner.fencing_token == outer.fencing_token and r.count() == 2
    r.release()
    r.release()
    caught_up(ns)  # a node may have answered after node_timeout on a busy machine
    assert all(not lease_keys(s, lock_name + "r") for s in redis_nodes)

    rw = redlease.ReadWriteLock(ns, lock_name + "rw", ttl=5)
    r1, r2, w = rw.reader(), rw.reader(), rw.writer()
    r1.acquire()
    r2.acquire()
    with pytest.raises(LockContention):
        w.acquire(blocking=False)
    r1.release()
    r2.release()
    w.acquire(blocking=False)
    w.release()
    ns.close()


def test_blocked_acquirer_is_woken_by_release(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    ns = nodeset(redis_nodes)
    a = redlease.Lock(ns, lock_name, ttl=10)
    b = redlease.Lock(ns, lock_name, ttl=10)
    a.acquire()
    releasing = threading.Event()

    def later() -> None:
        time.sleep(0.2)  # the scenario: a holds for a while, b has to wait
        releasing.set()  # set before the release, so b can never get the lock before it
        a.release()

    threading.Thread(target=later).start()
    start = time.monotonic()
    b.acquire(timeout=5)
    waited = time.monotonic() - start
    assert releasing.is_set()
    assert waited < 1.0  # woken by the notification, not by a 5 s fallback
    with pytest.raises(LockTimeout):
        a.acquire(timeout=0.2)
    b.release()
    ns.close()


async def test_asyncio_primitives(redis_nodes: list[RedisServer], lock_name: str) -> None:
    clients = [aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes]
    ns = NodeSet(clients)
    a = redlease.aio.Lock(ns, lock_name, ttl=5)
    b = redlease.aio.Lock(ns, lock_name, ttl=5)
    async with a as lease:
        with pytest.raises(LockContention):
            await b.acquire(blocking=False)
        assert lease.valid
    r = redlease.aio.ReentrantLock(ns, lock_name + "r", ttl=5)
    await r.acquire()
    await r.acquire()
    assert r.count() == 2
    await r.release()
    await r.release()
    w = redlease.aio.ReadWriteLock(ns, lock_name + "rw", ttl=5).writer()
    await w.acquire()
    await w.release()
    got = await b.acquire(timeout=1)
    assert got.fencing_token > lease.fencing_token
    await b.release()
    await ns.aclose()
    for c in clients:
        await c.aclose()


# --- outages -------------------------------------------------------------------------------------


def test_five_nodes_two_killed_three_killed_recovery(
    durable_nodes: list[RedisServer], lock_name: str
) -> None:
    ns = nodeset(durable_nodes, node_timeout=0.2, strict_restart=True)  # default: test_recovery
    lock = redlease.Lock(ns, lock_name, ttl=5)
    lock.acquire()
    lock.release()
    durable_nodes[0].kill()
    durable_nodes[1].kill()
    lease = lock.acquire(blocking=False)
    lock.release()
    durable_nodes[2].kill()
    start = time.monotonic()
    with pytest.raises(QuorumUnavailable) as info:
        lock.acquire(timeout=3)
    assert time.monotonic() - start < 1.0  # fails fast: an outage is not contention
    err = info.value
    down = {s.address for s in durable_nodes[:3]}
    assert set(err.nodes) == down
    for address in down:
        assert address in str(err)
    assert lock_name in str(err)
    for s in durable_nodes[:3]:
        s.start()  # AOF with fsync always: the data survived, but an older backup looks the same

    def refused() -> str:
        try:
            lock.acquire(blocking=False)
        except QuorumUnavailable as exc:
            return str(exc)
        return ""

    # their markers name the runs before: 2 intact nodes cannot re-seed 3, an operator vouches
    wait_until(lambda: "cannot rejoin by itself" in refused(), timeout=10)
    outside = ns.not_counting()
    assert set(outside) == down and all("earlier server run" in w for w in outside.values())
    for s in durable_nodes[:3]:
        client = s.client()
        client.hset("redlease:node", "run_id", client.info("server")["run_id"])
        client.close()

    def works() -> bool:
        try:
            lock.acquire(blocking=False)
        except QuorumUnavailable:
            return False
        return True

    wait_until(works, timeout=10)
    assert lock.lease() is not None
    assert lock.lease().fencing_token > lease.fencing_token  # type: ignore[union-attr]
    lock.release()
    ns.close()


def test_paused_node_does_not_stall(redis_nodes: list[RedisServer], lock_name: str) -> None:
    ns = nodeset(redis_nodes, node_timeout=0.1)
    lock = redlease.Lock(ns, lock_name, ttl=5)
    lock.acquire()
    lock.release()
    redis_nodes[2].pause()
    try:
        for _ in range(3):
            start = time.monotonic()
            lock.acquire(blocking=False)
            took = time.monotonic() - start
            lock.release()
            assert took < 0.1 + 0.25  # the per-node timeout, plus scheduling slack
    finally:
        redis_nodes[2].resume()
    # the acquires that waited in the paused node's socket ran, and so did their undo
    wait_until(lambda: not lease_keys(redis_nodes[2], lock_name), timeout=5)
    ns.close()


def test_renewal_needs_a_quorum(redis_nodes: list[RedisServer], lock_name: str) -> None:
    ns = nodeset(redis_nodes, node_timeout=0.1)
    lock = redlease.Lock(ns, lock_name, ttl=1.0)
    lost = threading.Event()
    with lock.hold(on_lost=lambda exc: lost.set()) as lease:
        time.sleep(0.5)  # let renewal run over the quorum at least once
        assert lease.valid
        redis_nodes[0].kill()
        redis_nodes[1].kill()
        assert lost.wait(3.0)
        assert not lease.valid
    ns.close()


def test_a_dead_node_costs_no_node_timeout(redis_nodes: list[RedisServer], lock_name: str) -> None:
    """With one of three nodes killed, acquire and release answer from the two live ones at
    once: the dead node's reconnects fail in one attempt, not after redis-py's retries with
    back-off (which made every acquire wait out node_timeout and every release two)."""
    ns = nodeset(redis_nodes, node_timeout=2.0)
    lock = redlease.Lock(ns, lock_name, ttl=10)
    lock.acquire()
    lock.release()  # first contact with all three: the set is marked
    redis_nodes[0].kill()
    slowest = 0.0
    for _ in range(4):  # across several reconnect windows of the dead node
        start = time.monotonic()
        lock.acquire()
        lock.release()
        slowest = max(slowest, time.monotonic() - start)
        time.sleep(RETRY_CONNECT)  # the fault's own timing: the next request reconnects
    assert slowest < 1.0, f"a pair took {slowest:.2f}s with node_timeout 2s"
    ns.close()


async def test_a_dead_node_costs_no_node_timeout_asyncio(
    redis_nodes: list[RedisServer], lock_name: str
) -> None:
    clients = [aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes]
    ns = NodeSet(clients, node_timeout=2.0)
    lock = redlease.aio.Lock(ns, lock_name, ttl=10)
    await lock.acquire()
    await lock.release()
    redis_nodes[0].kill()
    slowest = 0.0
    for _ in range(4):
        start = time.monotonic()
        await lock.acquire()
        await lock.release()
        slowest = max(slowest, time.monotonic() - start)
        await asyncio.sleep(RETRY_CONNECT)
    assert slowest < 1.0, f"a pair took {slowest:.2f}s with node_timeout 2s"
    await ns.aclose()
    for c in clients:
        await c.aclose()


# --- no stale keys -------------------------------------------------------------------------------


def caught_up(ns: NodeSet) -> None:
    """Until every node ran what this node set wrote to it: a PING written behind it all on each
    node's one connection has been answered (a slow node toggles between held and free while it
    catches up, so "no key now" alone proves nothing)."""
    barrier = [(ch, ch.submit(("PING",))) for ch in ns.channels()]
    _sync.collect(barrier, time.monotonic() + 10)
    assert all(slot.value is True or slot.value == b"PONG" for _, slot in barrier), barrier


async def caught_up_asyncio(ns: NodeSet) -> None:
    """:func:`caught_up` for an asyncio node set."""
    barrier = [(ch, ch.submit(("PING",))) for ch in ns.channels()]
    await _async.collect(barrier, time.monotonic() + 10)
    assert all(slot.value is True or slot.value == b"PONG" for _, slot in barrier), barrier


# The slow node answers SLOW_DELAY after each request, always past SLOW_NODE_TIMEOUT: every
# acquire is granted by the two fast nodes before it answers, and the release is written
# behind the acquire on its connection. The fast nodes must answer within SLOW_NODE_TIMEOUT
# however busy the machine: with 0.05 s, a fast node not scheduled for 50 ms while the slow one
# was late left no quorum (QuorumUnavailable; a fast node SIGSTOPped for 80 ms now and then
# failed 8 runs in 10). Each fan-out waits SLOW_NODE_TIMEOUT for the slow node: few pairs.
# The node turns slow after a first pair: a new set is marked once every node answered.
SLOW_NODE_TIMEOUT = 0.5
SLOW_DELAY = 2.0
SLOW_PAIRS = 5


def test_no_stale_key_with_a_slow_node(
    redis_nodes: list[RedisServer], proxies: list[Proxy], lock_name: str
) -> None:
    slow = Proxy(redis_nodes[2].port).start()
    proxies.append(slow)
    clients = [redis_nodes[0].client(), redis_nodes[1].client(), redis.Redis(port=slow.port)]
    ns = NodeSet(clients, node_timeout=SLOW_NODE_TIMEOUT)
    lock = redlease.Lock(ns, lock_name, ttl=10)
    other = redlease.Lock(ns, lock_name, ttl=10)
    lock.acquire()
    lock.release()
    slow.delay = SLOW_DELAY
    for _ in range(SLOW_PAIRS):
        lock.acquire()  # granted by the two fast nodes; the slow one answers later
        lock.release()  # written behind the acquire on the slow node's connection
    # what reached the slow node ran in order there: nothing is left once it caught up
    caught_up(ns)
    assert all(not lease_keys(s, lock_name) for s in redis_nodes)
    # and nobody else is blocked by a leftover: all three nodes grant at once
    other.acquire(blocking=False)
    assert all(lease_keys(s, lock_name) for s in redis_nodes[:2])
    other.release()
    ns.close()


async def test_no_stale_key_with_a_slow_node_asyncio(
    redis_nodes: list[RedisServer], proxies: list[Proxy], lock_name: str
) -> None:
    slow = Proxy(redis_nodes[0].port).start()
    proxies.append(slow)
    clients = [
        aioredis.Redis(port=slow.port),
        aioredis.Redis(port=redis_nodes[1].port),
        aioredis.Redis(port=redis_nodes[2].port),
    ]
    ns = NodeSet(clients, node_timeout=SLOW_NODE_TIMEOUT)
    lock = redlease.aio.Lock(ns, lock_name, ttl=10)
    await lock.acquire()
    await lock.release()
    slow.delay = SLOW_DELAY
    for _ in range(SLOW_PAIRS):
        await lock.acquire()
        await lock.release()
    await caught_up_asyncio(ns)
    assert all(not lease_keys(s, lock_name) for s in redis_nodes), "stale key left behind"
    await ns.aclose()
    for c in clients:
        await c.aclose()


# --- fencing and the restart rule --------------------------------------------------------------


@pytest.mark.parametrize("follow_rule", [True, False], ids=["with-rule", "without-rule"])
def test_restart_empty_fencing(
    redis_nodes: list[RedisServer], proxies: list[Proxy], lock_name: str, follow_rule: bool
) -> None:
    """Four tokens live only on A and B (C is cut off). B restarts empty and A stops
    answering: B and C alone could grant a second lease. The restart rule keeps B out until it
    was re-seeded from enough intact nodes; bypassing the rule still never lets the token go
    back (clock-seeded counters)."""
    a, b, c = redis_nodes
    cut = Proxy(c.port).start()
    proxies.append(cut)
    clients = [a.client(), b.client(), redis.Redis(port=cut.port)]
    # the strict restart mode: B waits for A to be re-seeded (by default B and C would rejoin
    # with the clock's seed: test_recovery.py)
    ns = NodeSet(clients, node_timeout=0.1, restart_delay=1.0, strict_restart=True)
    lock = redlease.Lock(ns, lock_name, ttl=0.5)
    first = lock.acquire().fencing_token
    lock.release()
    cut.cut()
    tokens = []
    for _ in range(4):
        tokens.append(lock.acquire().fencing_token)
        lock.release()
    assert first < tokens[0] < tokens[1] < tokens[2] < tokens[3]
    b.restart()  # no persistence: B forgets everything, fence counters included
    a.pause()
    cut.restore()
    try:
        if not follow_rule:
            # what an operator (or a client without the rule) does: trust B at once
            direct = b.client()
            info = direct.info("server")
            direct.hset("redlease:node", "run_id", info["run_id"])
            direct.close()
            wait_until(lambda: _try(lock) is not None, timeout=5)
            trusted = lock.lease().fencing_token  # type: ignore[union-attr]
            lock.release()
            # the quorum {B, C} lost B's counter, yet the token still grows: it is seeded from
            # the server clock (the rule still matters for the lease itself)
            assert trusted > tokens[-1]
            return
        # with the rule: B is out of quorums; only C is a member and A is silent
        with pytest.raises(QuorumUnavailable) as info:
            lock.acquire(blocking=False)
        assert b.address in info.value.nodes and a.address in info.value.nodes
        time.sleep(1.1)  # restart_delay passed, but A is needed to re-seed B: still out
        with pytest.raises(QuorumUnavailable):
            lock.acquire(blocking=False)
    finally:
        a.resume()
    wait_until(lambda: _try(lock) is not None, timeout=10)
    assert lock.lease().fencing_token > tokens[-1]  # type: ignore[union-attr]
    lock.release()
    # B is re-seeded from A and C by an operation once A answers again (a node is re-seeded at
    # most twice a second: the undo after the last refused acquire, cut at its 0.2 s deadline
    # while A was still paused, may have just tried)
    wait_until(lambda: _rejoined(lock, ns), timeout=10)
    ns.close()


def _rejoined(lock: redlease.Lock, ns: NodeSet) -> bool:
    if _try(lock) is not None:
        lock.release()
    return ns.health() == {"total": 3, "healthy": 3, "quorum": 2}


def _try(lock: redlease.Lock) -> redlease.Lease | None:
    try:
        return lock.acquire(blocking=False)
    except (QuorumUnavailable, LockContention):
        return None


def test_fence_is_raised_on_a_quorum(redis_nodes: list[RedisServer], lock_name: str) -> None:
    a = redis_nodes[0].client()
    ahead = 2**52  # one node ran ahead of the others' counters and of every clock
    a.set(f"redlease:{{{lock_name}}}:fence", ahead)
    ns = nodeset(redis_nodes)
    lock = redlease.Lock(ns, lock_name, ttl=5)
    lease = lock.acquire()
    assert lease.fencing_token == ahead + 1
    counters = [int(s.client().get(f"redlease:{{{lock_name}}}:fence") or 0) for s in redis_nodes]
    assert counters == [ahead + 1] * 3
    lock.release()
    ns.close()


def _scripts_run(server: RedisServer) -> int:
    """Scripts the server ran since its stats were reset (FCALL on Redis 7+, EVALSHA before)."""
    with server.client() as c:
        stats = c.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_fcall", "cmdstat_evalsha"))


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_counters_stay_in_step_so_a_grant_takes_one_round(
    redis_nodes: list[RedisServer], lock_name: str, flavour: str
) -> None:
    """A RedLock set's nodes issue the counter + 1 (the clock only seeds a counter that is
    absent): once in step they agree on every token, so a grant needs no second round to raise
    the others to the highest. With clock-seeded tokens on every node, each grant found the
    nodes apart and paid a raise round (the quorum pairs/s fell by a quarter)."""
    pairs = 20
    counter = f"redlease:{{{lock_name}}}:fence"

    def counters() -> list[int]:
        out = []
        for s in redis_nodes:
            with s.client() as c:
                out.append(int(c.get(counter) or 0))
        return out

    def reset() -> None:
        for s in redis_nodes:
            with s.client() as c:
                c.config_resetstat()

    if flavour == "sync":
        ns = nodeset(redis_nodes)
        lock = redlease.Lock(ns, lock_name, ttl=5)
        first = lock.acquire().fencing_token
        lock.release()
        reset()
        tokens = []
        for _ in range(pairs):
            tokens.append(lock.acquire().fencing_token)
            lock.release()
        ns.close()
    else:

        async def run() -> tuple[int, list[int]]:
            ns = NodeSet([aioredis.Redis(port=s.port, socket_timeout=5) for s in redis_nodes])
            lock = redlease.aio.Lock(ns, lock_name, ttl=5)
            first = (await lock.acquire()).fencing_token
            await lock.release()
            await asyncio.to_thread(reset)
            tokens = []
            for _ in range(pairs):
                tokens.append((await lock.acquire()).fencing_token)
                await lock.release()
            await ns.aclose()
            return first, tokens

        first, tokens = asyncio.run(run())
    assert first > 10**15  # the first grant seeded the counters from the clock
    assert tokens == list(range(first + 1, first + 1 + pairs))
    assert counters() == [tokens[-1]] * 3
    assert [_scripts_run(s) for s in redis_nodes] == [2 * pairs] * 3  # acquire + release


def test_ttl_beyond_restart_delay_is_refused(redis_nodes: list[RedisServer]) -> None:
    ns = nodeset(redis_nodes, restart_delay=10)
    with pytest.raises(redlease.ConfigError, match="restart_delay"):
        redlease.Lock(ns, "x", ttl=30)
    with pytest.raises(redlease.ConfigError, match="quorum"):
        nodeset(redis_nodes, quorum=1)
