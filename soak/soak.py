"""`make soak`: redlease for a long while under kills and restarts (docs/soak.md).

Two real ``redlease sidecar`` processes per lock on 10 locks, one real persistent redis-server,
and a real ``redlease operator`` refreshing 50 DistributedLocks (the 10 above and 40 idle ones)
in KMock over HTTP (in a process of its own: soak/api.py). Every 30 s the leader of each
lock is SIGKILLed (the locks staggered 3 s apart) and started again once its standby has taken
over; every 5 min redis-server is restarted (the first time 2.5 min in). Every minute (the
first time 10 s after the warm-up) a library waiter is SIGKILLed at a hand-off: a waiter process
enlists on a held lock, is killed, and the holder releases; a live waiter's wait for the lock
is the dead time (the hand-off to the dead waiter is provisional: docs/safety.md). Reported: the
failover time of every transition (SIGKILL to the heir's ``acquired_at``), the dead time of
every hand-off, RSS and open file descriptors of every process (from /proc) at its start and at
the end, the operator's asyncio tasks (its /metrics), and whether the operator's statuses name
the right holders at the end.

Usage: python soak/soak.py [--minutes N] [--report PATH] [--markdown PATH]
(``SOAK_MINUTES`` in the environment sets the default of --minutes, 20).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import faulthandler
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import aiohttp  # noqa: E402
import redis.asyncio  # noqa: E402

import redlease.aio  # noqa: E402
from bench.failover import Sidecar  # noqa: E402
from redlease.core.keys import LockKeys  # noqa: E402
from redlease.core.times import parse_time  # noqa: E402
from redlease.devtools.kubeemulator import NAMESPACE  # noqa: E402
from redlease.devtools.localredis import RedisServer, free_port  # noqa: E402
from redlease.devtools.operatorprocess import start_operator  # noqa: E402
from redlease.devtools.polling import async_wait_until  # noqa: E402

LOCKS = 10  # locks with two sidecars each
DLOCKS = 50  # DistributedLocks the operator refreshes
KILL_EVERY = 30.0  # s between two SIGKILLs of one lock's leader
REDIS_EVERY = 300.0  # s between two restarts of redis-server
TTL = 6.0  # the sidecars' lease: a SIGKILLed leader is replaced within about this
REFRESH = 1.0  # the operator's refresh interval
WARMUP = 30.0  # s after the start before the "start" figures are taken
POLL = 0.1  # s between two reads of a sidecar's /status while waiting for a take-over
TAKEOVER = 60.0  # s: a take-over not seen within this counts as failed
HANDOFF_EVERY = 60.0  # s between two waiters SIGKILLed at a hand-off (the first 10 s in)
HANDOFF_TTL = 60.0  # the waiters' TTL: what a hand-off to a dead one cost before
HANDOFF_BOUND = 20.0  # s: a live waiter not granted within this counts as failed


def proc_stats(pid: int) -> dict[str, int] | None:
    """RSS (KiB) and open file descriptors of a live process, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"rss_kib": rss, "fds": fds}


async def steady(pid: int | None, samples: int = 10) -> dict[str, int] | None:
    """Median RSS and open fds of ``samples`` reads 0.5 s apart (one read is noisy: the
    operator opens and closes API connections all the time); ``fds_max``: the highest read."""
    reads = []
    for _ in range(samples):
        stats = proc_stats(pid) if pid is not None else None
        if stats is not None:
            reads.append(stats)
        await asyncio.sleep(0.5)
    if not reads:
        return None
    return {
        "rss_kib": int(statistics.median(r["rss_kib"] for r in reads)),
        "fds": int(statistics.median(r["fds"] for r in reads)),
        "fds_max": max(r["fds"] for r in reads),
    }


async def enlisted(client: Any, direct: str, n: int) -> bool:
    """Whether ``n`` waiters are enlisted for the direct hand-off (``direct``: its hash)."""
    return int(await client.hlen(direct)) >= n


def summary(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "min": None, "p50": None, "max": None}
    return {
        "n": len(values),
        "min": round(min(values), 3),
        "p50": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


@dataclass
class Pair:
    """The two sidecars of one lock."""

    lock: str
    url: str
    sidecars: dict[str, Sidecar] = field(default_factory=dict)
    lives: list[dict[str, Any]] = field(default_factory=list)  # one per ended sidecar process

    def start(self, identity: str) -> Sidecar:
        sc = Sidecar(self.url, identity, TTL, self.lock)
        sc.started = time.monotonic()  # type: ignore[attr-defined]
        sc.first = None  # type: ignore[attr-defined]
        self.sidecars[identity] = sc
        return sc


class Soak:
    def __init__(self, minutes: float, work: Path) -> None:
        self.minutes = minutes
        self.work = work
        self.redis = RedisServer(persistent=True)
        self.pairs: list[Pair] = []
        self.failovers: list[dict[str, Any]] = []
        self.redis_restarts: list[dict[str, Any]] = []
        self.handoffs: list[dict[str, Any]] = []
        self.session: aiohttp.ClientSession | None = None
        self.t0 = time.monotonic()
        self.url = ""  # the API process's

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {text}", file=sys.stderr, flush=True)

    async def status(self, sc: Sidecar) -> dict[str, Any] | None:
        assert self.session is not None
        try:
            url = f"http://127.0.0.1:{sc.port}/status"
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                out: dict[str, Any] = await resp.json()
                return out
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def leader(self, pair: Pair) -> Sidecar | None:
        for sc in list(pair.sidecars.values()):
            st = await self.status(sc)
            if st is not None and st.get("leader") is True:
                return sc
        return None

    async def wait_leader(
        self, pair: Pair, timeout: float, not_: Sidecar | None = None
    ) -> tuple[Sidecar | None, dict[str, Any] | None, float]:
        """The sidecar of ``pair`` (other than ``not_``) that says it leads, its /status and the
        monotonic time it was seen; polled every POLL s (the failover time itself comes from
        the heir's ``acquired_at``, so this driver's own lag does not count)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for sc in list(pair.sidecars.values()):
                if sc is not_:
                    continue
                st = await self.status(sc)
                if st is not None and st.get("leader") is True:
                    return sc, st, time.monotonic()
            await asyncio.sleep(POLL)
        return None, None, time.monotonic()

    def sample(self, sc: Sidecar) -> None:
        stats = proc_stats(sc.proc.pid)
        if stats is not None and sc.first is None:  # type: ignore[attr-defined]
            sc.first = stats  # type: ignore[attr-defined]

    def end_life(self, pair: Pair, sc: Sidecar, last: dict[str, int] | None) -> None:
        """Record a sidecar's life (``last``: its figures just before the kill) and reap it."""
        pair.lives.append(
            {
                "identity": sc.identity,
                "seconds": round(time.monotonic() - sc.started, 1),  # type: ignore[attr-defined]
                "first": sc.first,  # type: ignore[attr-defined]
                "last": last,
            }
        )
        sc.stop(signal.SIGKILL)

    async def killer(self, index: int, pair: Pair, end: float) -> None:
        """SIGKILL this lock's leader every KILL_EVERY s; restart it after the take-over."""
        next_kill = time.monotonic() + index * (KILL_EVERY / LOCKS)  # staggered
        while next_kill < end:
            await asyncio.sleep(max(0.0, next_kill - time.monotonic()))
            next_kill += KILL_EVERY
            for sc in pair.sidecars.values():
                self.sample(sc)
            victim = await self.leader(pair)
            if victim is None:
                self.failovers.append({"lock": pair.lock, "skipped": "no leader at kill time"})
                continue
            last = proc_stats(victim.proc.pid)
            killed = time.time()
            victim.proc.send_signal(signal.SIGKILL)
            heir, st, _ = await self.wait_leader(pair, TAKEOVER, not_=victim)
            record: dict[str, Any] = {"lock": pair.lock, "killed": victim.identity}
            acquired = parse_time(st.get("acquired_at")) if st else None
            if heir is None or acquired is None:
                record["failed"] = f"no take-over seen within {TAKEOVER:g}s"
                record["standbys"] = {
                    sc.identity: {"status": await self.status(sc), "log": sc.tail()}
                    for sc in pair.sidecars.values()
                    if sc is not victim
                }
            else:
                record.update(took=heir.identity, seconds=round(acquired - killed, 3))
            self.failovers.append(record)
            self.say(f"{pair.lock}: {record}")
            del pair.sidecars[victim.identity]
            self.end_life(pair, victim, last)
            pair.start(victim.identity)

    async def redis_restarter(self, end: float) -> None:
        """Restart redis-server every REDIS_EVERY s, the first time half a period in (so that a
        shortened run has one too)."""
        next_restart = time.monotonic() + REDIS_EVERY / 2
        while next_restart < end:
            await asyncio.sleep(max(0.0, next_restart - time.monotonic()))
            next_restart += REDIS_EVERY
            before = proc_stats(self.redis.proc.pid) if self.redis.proc else None
            led = [await self.leader(p) for p in self.pairs]
            began = time.monotonic()
            # in this thread: a worker thread that exits takes the die-with-parent link along
            self.redis.restart()
            up = time.monotonic() - began
            leaders = await asyncio.gather(*(self.wait_leader(p, TAKEOVER) for p in self.pairs))
            all_led = max(at for _, _, at in leaders) - began
            changed = sum(
                1 for old, (new, _, _) in zip(led, leaders, strict=True) if old is not new
            )
            self.say(f"redis-server restarted: down {up:.2f}s, all led after {all_led:.2f}s")
            self.redis_restarts.append(
                {
                    "down_seconds": round(up, 3),
                    "all_locks_led_after": round(all_led, 3),
                    "without_leader": sum(1 for sc, _, _ in leaders if sc is None),
                    "leaders_changed": changed,
                    "before": before,
                    "after": proc_stats(self.redis.proc.pid) if self.redis.proc else None,
                }
            )

    async def handoff_killer(self, end: float) -> None:
        """Every HANDOFF_EVERY s: a waiter process enlists on a held lock and is SIGKILLed, the
        holder releases (the lease goes to the dead waiter, provisionally) and a live waiter,
        queued behind it, measures how long it waited from the release (the dead time)."""
        next_round = time.monotonic() + 10.0
        n = 0
        while next_round < end:
            await asyncio.sleep(max(0.0, next_round - time.monotonic()))
            next_round += HANDOFF_EVERY
            record = await self.handoff_round(f"soak-handoff-{n}")
            n += 1
            self.handoffs.append(record)
            self.say(f"hand-off to a SIGKILLed waiter: {record}")

    async def handoff_round(self, name: str) -> dict[str, Any]:
        client = redis.asyncio.Redis(port=self.redis.port)
        direct = LockKeys.for_name(name).direct
        waiter: asyncio.subprocess.Process | None = None
        task: asyncio.Task[Any] | None = None
        try:
            holder = redlease.aio.Lock(client, name, ttl=HANDOFF_TTL, identity="holder")
            first = await holder.acquire()
            waiter = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "redlease.devtools.lockworker", "hold",
                str(self.redis.port), name, str(HANDOFF_TTL), "60",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            await async_wait_until(lambda: enlisted(client, direct, 1), 60)
            waiter.kill()
            await waiter.wait()
            live = redlease.aio.Lock(client, name, ttl=HANDOFF_TTL, identity="live")
            live.prim = dataclasses.replace(
                live.prim,
                options=dataclasses.replace(live.prim.options, registration_grace=120),
            )  # queued behind the dead waiter, whose registration lapses first
            task = asyncio.create_task(live.acquire(timeout=HANDOFF_BOUND))
            await async_wait_until(lambda: enlisted(client, direct, 2), 60)
            released = time.monotonic()
            await holder.release()
            lease = await task
            dead = time.monotonic() - released
            state = await live.state()
            await live.release()
            return {
                "seconds": round(dead, 3),
                "handed_to_the_dead_waiter": state.transitions == first.transitions + 2,
                "tokens_rose": lease.fencing_token > first.fencing_token,
            }
        except (redlease.LockError, AssertionError) as exc:  # not granted / never enlisted
            return {"failed": f"{type(exc).__name__}: {exc}"}
        finally:
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, redlease.LockError):
                    await task
            if waiter is not None and waiter.returncode is None:
                waiter.kill()
                await waiter.wait()
            await client.aclose()

    async def operator_tasks(self, port: int) -> int | None:
        assert self.session is not None
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        for line in text.splitlines():
            if line.startswith("redlease_operator_asyncio_tasks "):
                return int(float(line.split()[1]))
        return None

    async def run(self) -> dict[str, Any]:
        self.redis.start()
        self.session = aiohttp.ClientSession()
        port = free_port()
        api = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(__file__).with_name("api.py")), str(port),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert api.stdout is not None
            line = await asyncio.wait_for(api.stdout.readline(), 60)
            assert line.strip() == b"ready", f"the API process did not start: {line!r}"
            self.url = f"http://127.0.0.1:{port}"
            return await self._run()
        finally:
            if api.returncode is None:
                api.terminate()
                await api.wait()
            await self.session.close()
            for pair in self.pairs:
                for sc in pair.sidecars.values():
                    sc.stop(signal.SIGTERM)
            self.redis.stop()

    def _locks_url(self, name: str = "") -> str:
        path = f"/apis/redlease.dev/v1alpha1/namespaces/{NAMESPACE}/distributedlocks"
        return f"{self.url}{path}/{name}" if name else f"{self.url}{path}"

    async def create(self, name: str, spec: dict[str, Any]) -> None:
        assert self.session is not None
        body = {
            "apiVersion": "redlease.dev/v1alpha1",
            "kind": "DistributedLock",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        }
        async with self.session.post(self._locks_url(), json=body) as resp:
            assert resp.status == 201, await resp.text()

    async def _run(self) -> dict[str, Any]:
        metrics = free_port()
        operator = await start_operator(
            self.url, self.work, "--metrics", f"127.0.0.1:{metrics}", refresh=REFRESH
        )
        try:
            for i in range(DLOCKS):
                name = f"soak-{i}"
                spec = {"keys": [name], "nodes": [{"url": self.redis.url}], "ttlSeconds": int(TTL)}
                await self.create(name, spec)
            for i in range(LOCKS):
                pair = Pair(f"soak-{i}", self.redis.url)
                for side in ("a", "b"):
                    pair.start(f"soak-{i}-{side}")
                self.pairs.append(pair)
            began = time.monotonic()
            end = began + self.minutes * 60
            self.say(f"started; the run ends in {self.minutes * 60:g}s")
            for pair in self.pairs:
                sc, _, _ = await self.wait_leader(pair, TAKEOVER)
                assert sc is not None, f"{pair.lock}: no leader at the start"
            await asyncio.sleep(max(0.0, began + WARMUP - time.monotonic()))
            self.say("every lock has a leader: start figures")
            op_start, redis_start = await asyncio.gather(
                steady(operator.proc.pid), steady(self.redis.proc.pid if self.redis.proc else None)
            )
            op_tasks_start = await self.operator_tasks(metrics)
            await asyncio.gather(
                *(self.killer(i, p, end) for i, p in enumerate(self.pairs)),
                self.redis_restarter(end),
                self.handoff_killer(end),
            )
            self.say("end figures")
            op_end, redis_end = await asyncio.gather(
                steady(operator.proc.pid), steady(self.redis.proc.pid if self.redis.proc else None)
            )
            op_tasks_end = await self.operator_tasks(metrics)
            self.say("checking the operator's statuses")
            wrong_statuses = await self.statuses_agree(metrics)
            api_latency = await self.api_latency()
            for pair in self.pairs:
                for sc in pair.sidecars.values():
                    self.sample(sc)
        finally:
            self.say("stopping the operator")
            code = await operator.stop()
            self.say(f"operator stopped: exit status {code}")
        took = [f["seconds"] for f in self.failovers if "seconds" in f]
        lives = [life for p in self.pairs for life in p.lives]
        return {
            "minutes": self.minutes,
            "setup": {
                "locks": LOCKS,
                "sidecars_per_lock": 2,
                "distributed_locks": DLOCKS,
                "kill_every_s": KILL_EVERY,
                "redis_restart_every_s": REDIS_EVERY,
                "ttl_s": TTL,
                "operator_refresh_s": REFRESH,
                "warmup_s": WARMUP,
                "handoff_every_s": HANDOFF_EVERY,
                "handoff_ttl_s": HANDOFF_TTL,
            },
            "failover_seconds": summary(took),
            "failovers": self.failovers,
            "failed_failovers": [f for f in self.failovers if "failed" in f],
            "skipped_kills": [f for f in self.failovers if "skipped" in f],
            "redis_restarts": self.redis_restarts,
            "handoff_dead_seconds": summary(
                [h["seconds"] for h in self.handoffs if "seconds" in h]
            ),
            "handoffs": self.handoffs,
            "failed_handoffs": [
                h
                for h in self.handoffs
                if "failed" in h or not (h["handed_to_the_dead_waiter"] and h["tokens_rose"])
            ],
            "operator": {
                "start": op_start,
                "end": op_end,
                "asyncio_tasks_start": op_tasks_start,
                "asyncio_tasks_end": op_tasks_end,
                "exit_status": code,
                "statuses_not_naming_the_leader_at_the_end": wrong_statuses,
                "emulator_get_seconds_at_the_end": api_latency,
            },
            "redis": {"start": redis_start, "end": redis_end},
            "sidecar_lives": lives,
        }

    async def statuses_agree(self, metrics: int) -> dict[str, Any]:
        """Lock -> [leading sidecar, its fencing token, the token in the operator's last status
        of the lock] where these still differ 3 refreshes (and 10 s) after the end; empty when
        the operator has seen every current term. Read from the operator's /metrics
        (``redlease_lock_fencing_token``), not from the emulator, which can be slow by then."""
        assert self.session is not None
        deadline = time.monotonic() + 3 * REFRESH + 10
        while True:
            tokens: dict[str, int] = {}
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                url = f"http://127.0.0.1:{metrics}/metrics"
                async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
                    text = await r.text()
                for line in text.splitlines():
                    if line.startswith("redlease_lock_fencing_token{"):
                        name = line.split('name="', 1)[1].split('"', 1)[0]
                        tokens[name] = int(float(line.rsplit(" ", 1)[1]))
            wrong: dict[str, Any] = {}
            for pair in self.pairs:
                sc = await self.leader(pair)
                st = await self.status(sc) if sc is not None else None
                token = st.get("fencing_token") if st else None
                if token is None or tokens.get(pair.lock) != token:
                    wrong[pair.lock] = [sc.identity if sc else None, token, tokens.get(pair.lock)]
            if not wrong or time.monotonic() > deadline:
                return wrong
            await asyncio.sleep(0.5)

    async def api_latency(self) -> float | None:
        """Seconds the emulator takes to answer one GET (None: not within 10 s)."""
        assert self.session is not None
        began = time.monotonic()
        try:
            timeout = aiohttp.ClientTimeout(total=10)
            async with self.session.get(self._locks_url("soak-0"), timeout=timeout) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError):
            return None
        return round(time.monotonic() - began, 3)


def growth(first: dict[str, int] | None, last: dict[str, int] | None, key: str) -> float | None:
    if not first or not last or not first.get(key):
        return None
    return round(100.0 * (last[key] - first[key]) / first[key], 1)


def markdown(report: dict[str, Any]) -> str:
    op = report["operator"]
    fo = report["failover_seconds"]
    ho = report["handoff_dead_seconds"]
    lives = report["sidecar_lives"]
    rss = [growth(life["first"], life["last"], "rss_kib") for life in lives]
    fds = [growth(life["first"], life["last"], "fds") for life in lives]
    rss_g = [g for g in rss if g is not None]
    fds_g = [g for g in fds if g is not None]
    s = report["setup"]
    lines = [
        f"# Soak: {report['minutes']:g} minutes",
        "",
        "Written by `make soak` (soak/soak.py, 20 minutes; `SOAK_MINUTES=N` shortens it) "
        "with the figures of its last run on this machine (2 cores shared with other work).",
        "",
        f"{s['locks']} locks x {s['sidecars_per_lock']} `redlease sidecar` processes (ttl "
        f"{s['ttl_s']:g} s) on one persistent redis-server; `redlease operator` refreshing "
        f"{s['distributed_locks']} DistributedLocks every {s['operator_refresh_s']:g} s in KMock. "
        f"Each lock's leader SIGKILLed every {s['kill_every_s']:g} s (restarted after the "
        f"take-over); redis-server restarted every {s['redis_restart_every_s']:g} s (the first "
        f"time after half of that); every {s['handoff_every_s']:g} s a library waiter (TTL "
        f"{s['handoff_ttl_s']:g} s) SIGKILLed at a hand-off. "
        f'"Start" figures are taken {s["warmup_s"]:g} s after the start; RSS and open fds are '
        "the median of 10 reads of /proc 0.5 s apart, asyncio tasks from the operator's "
        "`redlease_operator_asyncio_tasks` (the sidecars do not expose theirs).",
        "",
        "## Failover (SIGKILL of the leader to the heir's `acquired_at`)",
        "",
        "| transitions | min s | p50 s | max s | failed | kills skipped (no leader) |",
        "|---|---|---|---|---|---|",
        f"| {fo['n']} | {fo['min']} | {fo['p50']} | {fo['max']} "
        f"| {len(report['failed_failovers'])} | {len(report['skipped_kills'])} |",
        "",
        "## Hand-off to a SIGKILLed waiter (the holder's release to a live waiter's grant)",
        "",
        "| hand-offs | min s | p50 s | max s | failed |",
        "|---|---|---|---|---|",
        f"| {ho['n']} | {ho['min']} | {ho['p50']} | {ho['max']} "
        f"| {len(report['failed_handoffs'])} |",
        "",
        "A waiter process enlists on a held lock and is SIGKILLed; the holder releases, which "
        "hands the lease to the dead waiter (its registration has not lapsed), provisionally "
        "(2 s, docs/safety.md); a live waiter queued behind it takes the lock at its next "
        "attempt. Failed: not granted within "
        f"{HANDOFF_BOUND:g} s, the lease not handed to the dead waiter, or a token that did "
        "not rise.",
        "",
        "## Processes",
        "",
        "| process | RSS start KiB | RSS end KiB | growth | fds start | fds end | growth "
        "| asyncio tasks start / end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, part, tasks in (
        ("operator", op, f"{op['asyncio_tasks_start']} / {op['asyncio_tasks_end']}"),
        ("redis-server", report["redis"], "n/a"),
    ):
        a, b = part["start"] or {}, part["end"] or {}
        lines.append(
            f"| {name} | {a.get('rss_kib')} | {b.get('rss_kib')} "
            f"| {growth(a, b, 'rss_kib')} % | {a.get('fds')} | {b.get('fds')} "
            f"| {growth(a, b, 'fds')} % | {tasks} |"
        )
    if lives:
        lines.append(
            f"| sidecars ({len(lives)} lives, each from its first sample to its SIGKILL) "
            f"| | | max {max(rss_g, default=0)} % | | | max {max(fds_g, default=0)} % | n/a |"
        )
    lines += [
        "",
        "Limit of the harness: KMock matches every request against logs of the requests it "
        "has served (soak/api.py trims the main one), so it gets slower as the run goes "
        "on, the more so on a loaded machine: at the end of one 5-minute run beside other "
        "test runs it no longer answered a GET within 10 s and the operator's statuses lagged "
        "behind the sidecars. The last line below says how fast it answered at the end of "
        "this run and which terms the operator had not seen; read the operator's end figures "
        "with that in mind. Its open descriptors follow its API connections (they went down "
        "in one run and up in another), not a leak of their own.",
        "",
        "Sidecar lives last one to two kill periods (each sidecar is the leader, hence killed, "
        "every other period), so their growth is per life, not over the whole run. The "
        "redis-server figures are of its last life when it was restarted during the run.",
        "",
        "## Redis restarts",
        "",
        "| down s | every lock led again after s | locks whose leader changed | without leader |",
        "|---|---|---|---|",
        *(
            f"| {r['down_seconds']} | {r['all_locks_led_after']} | {r['leaders_changed']} "
            f"| {r['without_leader']} |"
            for r in report["redis_restarts"]
        ),
        "",
        "Locks whose current term (the leader's fencing token) the operator had not seen at the "
        "end ({lock: [leader, its token, token in the operator's status]}): "
        f"{op['statuses_not_naming_the_leader_at_the_end'] or 'none'}; operator exit status "
        f"{op['exit_status']}; the emulator answered a GET in "
        f"{op['emulator_get_seconds_at_the_end']} s at the end (None: not within 10 s).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", 20)))
    parser.add_argument("--report", default="soak-report.json")
    parser.add_argument("--markdown", default=str(ROOT / "docs" / "soak.md"))
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` prints where a stuck run is
    with tempfile.TemporaryDirectory(prefix="redlease-soak-") as work:
        report = asyncio.run(Soak(args.minutes, Path(work)).run())
    Path(args.report).write_text(json.dumps(report, indent=2) + "\n")
    Path(args.markdown).write_text(markdown(report))
    print(markdown(report))
    operator = report["operator"]
    bad = (
        report["failed_failovers"]
        or report["failed_handoffs"]
        or operator["statuses_not_naming_the_leader_at_the_end"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
