"""Where does an uncontended acquire+release pair spend its time? ``python -m bench.profile``.

Splits one pair into the three parts that can differ between lock libraries and prints them
for redlease and redis-py's Lock, sync and asyncio, on one local redis-server:

* Redis execution time (``INFO commandstats``: usec spent inside EVALSHA/FCALL/SET/...) and
  the server's main-thread CPU time (``INFO cpu``, socket I/O included);
* client CPU (``time.process_time``) per pair;
* wall time per pair (what pairs/s measures);

then a pyinstrument profile of redlease's sync loop (``--pyinstrument``), with ``--quorum``
the ceiling of a 3-node quorum: redlease's own scripts fanned out from one thread without
worker threads (send to every node, then read every reply), against the library, and with
``--floor`` the Redis time of the least a fenced lease in DESIGN.md's data model can do, and
of a leaner record than the data model allows (see :data:`FLOOR_LIBRARY`), against
redlease's and redis-py's pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis

import redlease
from bench.uncontended import exec_usec, server_cpu_us
from redlease import aio
from redlease.devtools.localredis import RedisServer


def _calls(client: redis.Redis) -> dict[str, int]:
    return {k[8:]: v["calls"] for k, v in client.info("commandstats").items()}


def measure_sync(client: redis.Redis, acquire: Callable[[], Any], release: Callable[[], Any],
                 n: int) -> dict[str, float]:  # fmt: skip
    for _ in range(200):
        acquire()
        release()
    client.config_resetstat()
    s0 = server_cpu_us([client])
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        acquire()
        release()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    srv, ex = server_cpu_us([client]) - s0, exec_usec([client])
    return {"wall_us": wall / n * 1e6, "client_cpu_us": cpu / n * 1e6, "redis_exec_us": ex / n,
            "redis_cpu_us": srv / n}  # fmt: skip


async def measure_async(port: int, make: Callable[[Any], Any], n: int) -> dict[str, float]:
    client = aioredis.Redis(host="127.0.0.1", port=port)
    stat = [redis.Redis(host="127.0.0.1", port=port)]
    lock = make(client)
    for _ in range(200):
        await lock.acquire()
        await lock.release()
    stat[0].config_resetstat()
    s0 = server_cpu_us(stat)
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        await lock.acquire()
        await lock.release()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    srv, ex = server_cpu_us(stat) - s0, exec_usec(stat)
    await client.aclose()
    stat[0].close()
    return {"wall_us": wall / n * 1e6, "client_cpu_us": cpu / n * 1e6, "redis_exec_us": ex / n,
            "redis_cpu_us": srv / n}  # fmt: skip


# The least a fenced lease can do per pair in DESIGN.md's data model (a lease hash with a PX TTL,
# a separate fence counter, server TIME): acquire = read the owner, INCR the fence, TIME, HSET
# the record, PEXPIRE; release = read the owner, DEL. No history, no waiters, no reentrancy:
# what is left is the price of fencing a lease in Redis, against redis-py's SET + 2-call script.
FLOOR_LIBRARY = r"""#!lua name=redlease_floor
-- The least a fenced lease can do in DESIGN.md's data model (a lease hash with a PX TTL, a
-- separate fence counter, server TIME), written as leanly as redlease's scripts (values kept as
-- strings, a string reply): read the owner, INCR, TIME, HSET, PEXPIRE; read the owner, DEL.
-- No history, no waiters, no reservation, no reentrancy.
redis.register_function('floor_acquire', function(KEYS, ARGV)
  if redis.call('HGET', KEYS[1], 'owner') then return 0 end
  local fence = string.format('%d', redis.call('INCR', KEYS[2]))
  local t = redis.call('TIME')
  local now = t[1] .. string.sub('00000' .. t[2], -6, -4)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holder', ARGV[3], 'fence', fence,
    'acquired_ms', now, 'ttl_ms', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return fence .. ' 1 ' .. now
end)
redis.register_function('floor_release', function(KEYS, ARGV)
  if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return -1 end
  redis.call('DEL', KEYS[1])
  return 0
end)
-- The least that keeps every rule of DESIGN.md an uncontended pair meets (the floor above does
-- not): a token never issued twice after a restart without data (the larger of the counter + 1
-- and the server clock in us, one SET ... GET), the transitions count of the lease record (its
-- holder and count kept beside the lease, which a release deletes), and a release that looks
-- for waiters to notify (one EXISTS; none here). No reservation, hand-off keys or reentrancy.
redis.register_function('contract_acquire', function(KEYS, ARGV)
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  local t = redis.call('TIME')
  local us = t[1] .. string.sub('00000' .. t[2], -6)
  local fence = us
  local prev = redis.call('SET', KEYS[2], us, 'GET')
  if prev and prev - us >= 0 then
    fence = string.format('%d', prev + 1)
    redis.call('SET', KEYS[2], fence)
  end
  local h = redis.call('HMGET', KEYS[3], 'holder', 'transitions')
  local transitions = h[2] or '0'
  if h[1] ~= ARGV[3] then
    transitions = string.format('%d', tonumber(transitions) + 1)
    redis.call('HSET', KEYS[3], 'holder', ARGV[3], 'transitions', transitions)
  end
  local now = string.sub(us, 1, -4)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holder', ARGV[3], 'fence', fence,
    'acquired_ms', now, 'ttl_ms', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return fence .. ' 1 ' .. now .. ' ' .. transitions
end)
redis.register_function('contract_release', function(KEYS, ARGV)
  if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then return -1 end
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[2]) == 1 then return 1 end  -- would notify them
  return 0
end)
-- Leaner than the data model allows: the lease as one string 'owner fence now holder' set
-- with PX (one write instead of HSET + PEXPIRE), the same fence counter and server TIME.
redis.register_function('string_acquire', function(KEYS, ARGV)
  if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  local fence = string.format('%d', redis.call('INCR', KEYS[2]))
  local t = redis.call('TIME')
  local now = t[1] .. string.sub('00000' .. t[2], -6, -4)
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. fence .. ' ' .. now .. ' ' .. ARGV[3], 'PX',
    ARGV[2])
  return fence .. ' 1 ' .. now
end)
redis.register_function('string_release', function(KEYS, ARGV)
  local cur = redis.call('GET', KEYS[1])
  if not cur or string.sub(cur, 1, #ARGV[1]) ~= ARGV[1] then return -1 end
  redis.call('DEL', KEYS[1])
  return 0
end)
"""


CONTRACT_FLOOR = "contract floor (token rule, transitions, waiters; 9 calls)"


def floor_exec(pairs: int, reps: int) -> dict[str, float]:
    """Redis execution us per pair (``INFO commandstats``, as the bench measures it) of the
    floor above, redlease's Lock and redis-py's Lock; interleaved repetitions, medians."""
    return {name: statistics.median(v) for name, v in floor_samples(pairs, reps).items()}


def floor_pairs(client: redis.Redis) -> dict[str, Callable[[], Any]]:
    """One uncontended pair of each contender of the floor comparison on ``client``'s server,
    whose ``FLOOR_LIBRARY`` is loaded (:func:`floor_samples`, :mod:`bench.instructions`)."""
    rl = redlease.Lock(client, "floor-rl", ttl=10)
    rp = client.lock("floor-rp", timeout=10)
    keys = ("redlease:{floor}", "redlease:{floor}:fence")
    skeys = ("redlease:{string}", "redlease:{string}:fence")
    ckeys = ("redlease:{contract}", "redlease:{contract}:fence", "redlease:{contract}:history")

    def floor_pair() -> None:
        client.fcall("floor_acquire", 2, *keys, "tok", 10000, "me")
        client.fcall("floor_release", 1, keys[0], "tok")

    def contract_pair() -> None:
        client.fcall("contract_acquire", 3, *ckeys, "tok", 10000, "me")
        client.fcall("contract_release", 2, ckeys[0], "redlease:{contract}:waiters", "tok")

    def string_pair() -> None:
        client.fcall("string_acquire", 2, *skeys, "tok", 10000, "me")
        client.fcall("string_release", 1, skeys[0], "tok")

    return {
        "redlease Lock": lambda: (rl.acquire(), rl.release()),
        "floor (fenced lease, 7 calls)": floor_pair,
        CONTRACT_FLOOR: contract_pair,
        "string lease (fenced, 6 calls)": string_pair,
        "redis-py Lock": lambda: (rp.acquire(), rp.release()),
    }


def floor_samples(pairs: int, reps: int) -> dict[str, list[float]]:
    """:func:`floor_exec`'s repetitions, every one (us per pair, in the order they ran)."""
    with RedisServer() as server:
        client = server.client()
        client.function_load(FLOOR_LIBRARY)
        pairs_of = floor_pairs(client)
        out: dict[str, list[float]] = {name: [] for name in pairs_of}
        for _ in range(reps):
            for name, pair in pairs_of.items():
                for _ in range(200):
                    pair()
                client.config_resetstat()
                for _ in range(pairs):
                    pair()
                out[name].append(exec_usec([client]) / pairs)
        client.close()
    return out


def quorum_ceiling(seconds: float = 1.0, reps: int = 5) -> tuple[float, float, float]:
    """(raw single-thread fan-out, redlease NodeSet, aioredlock) pairs/s on 3 local nodes.

    Interleaved repetitions, medians.
    """
    import secrets

    from bench.uncontended import _aioredlock, _time_async
    from redlease.core import scripts

    servers = [RedisServer().start() for _ in range(3)]
    try:
        conns = []
        for s in servers:
            c = s.client()
            c.script_load(scripts.ACQUIRE.lua)
            c.script_load(scripts.RELEASE.lua)
            conns.append(c.connection_pool.get_connection())
        conns_any: list[Any] = conns  # redis-py's Connection methods are untyped
        keys = [f"redlease:{{ceil}}{k}" for k in ("", ":fence", ":history", ":waiters")]
        keys.append("redlease:{ceil}:handoff")
        rkeys = (keys[0], keys[3], keys[4], "redlease:{ceil}:wake")

        def fan(*args: Any) -> list[Any]:
            packed = conns_any[0].pack_command(*args)
            for conn in conns_any:
                conn.send_packed_command(packed, check_health=False)
            out = []
            for conn in conns:
                if not conn.can_read(timeout=0.25):
                    raise TimeoutError("node did not answer")
                out.append(conn.read_response())
            return out

        def raw_pair() -> None:
            tok = secrets.token_hex(16)
            fan("EVALSHA", scripts.ACQUIRE.sha, 5, *keys, tok, 10000, "id", 0)
            fan("EVALSHA", scripts.RELEASE.sha, 4, *rkeys, tok)

        lib: redlease.Lock | None = None
        try:
            from redlease.quorum import NodeSet
        except ImportError:
            pass
        else:
            lib = redlease.Lock(NodeSet([s.client() for s in servers]), "ceil-lib", ttl=10)
        raw, ours, peer = [], [], []
        a_acq, a_rel, a_close = _aioredlock([s.port for s in servers], "ceil-arl")
        loop = asyncio.new_event_loop()
        for _ in range(reps):
            n_a, took = loop.run_until_complete(_time_async(a_acq, a_rel, seconds))
            peer.append(n_a / took)
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                raw_pair()
                n += 1
            raw.append(n / (time.perf_counter() - t0))
            if lib is not None:
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    lib.acquire()
                    lib.release()
                    n += 1
                ours.append(n / (time.perf_counter() - t0))
        loop.run_until_complete(a_close())
        loop.close()
        nan = float("nan")
        return (
            statistics.median(raw),
            statistics.median(ours) if ours else nan,
            statistics.median(peer),
        )
    finally:
        for s in servers:
            s.stop()


def _peer_shaped_library() -> str:
    """redlease's Functions library with the acquire and release functions replaced by what
    aioredlock's scripts do (``GET`` then ``SET PX``; ``GET`` then ``DEL``), under the same
    names and reply shapes: redlease's client, a peer's Redis work."""
    from redlease.core import scripts

    lib = scripts.LIBRARY.replace("\n", "\nlocal function _unused(...) end\n", 1)
    for s in (scripts.ACQUIRE, scripts.RELEASE):
        lib = lib.replace(f"redis.register_function('{s.function}'", "_unused('x'")
    return lib + (
        f"redis.register_function('{scripts.ACQUIRE.function}', function(KEYS, ARGV)\n"
        "  local id = redis.call('GET', KEYS[1] .. ':peer')\n"
        "  if id and id ~= ARGV[1] then return {0, 10, 'other'} end\n"
        "  redis.call('SET', KEYS[1] .. ':peer', ARGV[1], 'PX', ARGV[2])\n"
        "  return '1 1 1000 1'\nend)\n"
        f"redis.register_function('{scripts.RELEASE.function}', function(KEYS, ARGV)\n"
        "  if redis.call('GET', KEYS[1] .. ':peer') == ARGV[1] then\n"
        "    redis.call('DEL', KEYS[1] .. ':peer')\n  end\n  return 0\nend)\n"
    )


def quorum_scripts(seconds: float = 1.0, reps: int = 7) -> dict[str, tuple[float, float, float]]:
    """asyncio pairs/s on 3 local nodes, interleaved, medians: redlease's ``aio.Lock`` with its
    own scripts, the same client with aioredlock-shaped scripts (:func:`_peer_shaped_library`,
    on a second set of nodes), and aioredlock: how much of the gap to aioredlock is the client
    and how much the Redis work of a fenced lease with a record and fair waiting. Each value:
    (pairs/s, the client's CPU us per pair, the 3 servers' CPU us per pair): with the client
    and the servers sharing 2 cores, a client that costs less can still make fewer pairs/s."""
    from bench.uncontended import _aioredlock, _time_async
    from redlease.quorum import NodeSet

    real = [RedisServer().start() for _ in range(3)]
    shaped = [RedisServer().start() for _ in range(3)]
    stats_of = {id(s): s.client() for s in real + shaped}
    loop = asyncio.new_event_loop()
    try:
        lib = _peer_shaped_library()
        for s in shaped:
            stats_of[id(s)].function_load(lib, replace=True)

        def ours(servers: list[RedisServer], name: str) -> tuple[Any, Any, Any]:
            ns = NodeSet([aioredis.Redis(port=s.port) for s in servers])
            lock = aio.Lock(ns, name, ttl=10)
            return lock.acquire, lock.release, ns.aclose

        contenders = {
            "redlease aio.Lock, its scripts": (ours(real, "qs-real"), real),
            "redlease aio.Lock, aioredlock-shaped scripts": (ours(shaped, "qs-shaped"), shaped),
            "aioredlock": (_aioredlock([s.port for s in real], "qs-arl"), real),
        }
        out: dict[str, list[tuple[float, float, float]]] = {name: [] for name in contenders}
        for (acq, rel, _), _ in contenders.values():
            loop.run_until_complete(_time_async(acq, rel, 0.2))
        for rep in range(reps):
            names = list(contenders)
            for name in names[rep % 3 :] + names[: rep % 3]:
                (acq, rel, _), servers = contenders[name]
                clients = [stats_of[id(s)] for s in servers]
                cpu0, srv0 = time.process_time(), server_cpu_us(clients)
                n, took = loop.run_until_complete(_time_async(acq, rel, seconds))
                cpu = (time.process_time() - cpu0) * 1e6 / n
                out[name].append((n / took, cpu, (server_cpu_us(clients) - srv0) / n))
        for (_, _, close), _ in contenders.values():
            loop.run_until_complete(close())
        return {
            name: (
                statistics.median(r for r, _, _ in v),
                statistics.median(c for _, c, _ in v),
                statistics.median(x for _, _, x in v),
            )
            for name, v in out.items()
        }
    finally:
        loop.close()
        for c in stats_of.values():
            c.close()
        for s in real + shaped:
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.profile")
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pyinstrument", action="store_true")
    ap.add_argument("--quorum", action="store_true", help="also the 3-node fan-out ceiling")
    ap.add_argument("--floor", action="store_true", help="only the fenced-lease Redis floor")
    ap.add_argument(
        "--quorum-scripts",
        action="store_true",
        help="only: 3-node asyncio pairs/s with redlease's and aioredlock-shaped scripts",
    )
    args = ap.parse_args()
    if args.quorum_scripts:
        rates = quorum_scripts()
        peer = rates["aioredlock"][0]
        print("3-node asyncio, medians of 7 interleaved runs: pairs/s; CPU us per pair of the")
        print("client process and of the 3 servers' main threads")
        for name, (rate, cpu, srv) in rates.items():
            print(
                f"  {name:<46} {rate:7,.0f}  {rate / peer:.2f}x aioredlock"
                f"  client {cpu:6.1f} us  servers {srv:6.1f} us"
            )
        return
    if args.floor:
        floor = floor_exec(args.pairs, args.reps)
        base = floor["redis-py Lock"]
        print(f"Redis execution per pair, median of {args.reps} interleaved runs (us):")
        for name, us in floor.items():
            print(f"  {name:<32} {us:6.1f}  {us / base:.2f}x redis-py's")
        return
    if args.quorum:
        raw, ours, peer = quorum_ceiling()
        print(
            f"3 nodes: single-thread fan-out of redlease's scripts {raw:,.0f} pairs/s, "
            f"redlease NodeSet (sync) {ours:,.0f} pairs/s, aioredlock {peer:,.0f} pairs/s"
        )
    with RedisServer() as server:
        client = server.client()
        rl = redlease.Lock(client, "prof-rl", ttl=10)
        rp = client.lock("prof-rp", timeout=10)
        rows: dict[str, list[dict[str, float]]] = {}
        for _ in range(args.reps):  # interleaved
            rows.setdefault("redlease Lock", []).append(
                measure_sync(client, rl.acquire, rl.release, args.pairs)
            )
            rows.setdefault("redis-py Lock", []).append(
                measure_sync(client, rp.acquire, rp.release, args.pairs)
            )
            rows.setdefault("redlease aio.Lock", []).append(
                asyncio.run(
                    measure_async(
                        server.port, lambda c: aio.Lock(c, "prof-arl", ttl=10), args.pairs
                    )
                )
            )
            rows.setdefault("redis.asyncio Lock", []).append(
                asyncio.run(
                    measure_async(server.port, lambda c: c.lock("prof-arp", timeout=10), args.pairs)
                )
            )
        client.config_resetstat()
        rl.acquire()
        rl.release()
        print("Redis commands behind one redlease pair:", _calls(client))
        print(f"\nper pair, median of {args.reps} interleaved runs of {args.pairs} pairs (us):")
        print(
            f"  {'contender':<20} {'wall':>8} {'client CPU':>11} {'Redis exec':>11} "
            f"{'Redis CPU':>10}"
        )
        for name, rs in rows.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(
                f"  {name:<20} {med['wall_us']:8.1f} {med['client_cpu_us']:11.1f} "
                f"{med['redis_exec_us']:11.1f} {med['redis_cpu_us']:10.1f}"
            )
        if args.pyinstrument:
            from pyinstrument import Profiler

            prof = Profiler(interval=0.0002)
            prof.start()
            for _ in range(args.pairs):
                rl.acquire()
                rl.release()
            prof.stop()
            print(prof.output_text(color=False, unicode=False))


if __name__ == "__main__":
    main()
