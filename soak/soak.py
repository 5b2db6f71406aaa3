"""`make soak`: redlease for a long while under kills and restarts (docs/soak.md).

Part one: two real ``redlease sidecar`` processes per lock on 10 locks, on one persistent
redis-server. Every 30 s the leader of each lock is SIGKILLed (the locks staggered 3 s apart)
and started again once its standby has taken over; every 5 min redis-server is restarted (the
first time 2.5 min in). Every minute (the first time 10 s after the warm-up) a library waiter
is SIGKILLed at a hand-off (soak/handoff.py): a live waiter's wait for the lock is the dead
time (the hand-off to the dead waiter is provisional: docs/safety.md).

Part two (soak/quorum.py): a 5-node RedLock set of persistent redis-servers, 3 locks on it
with two ``redlease sidecar --lock-ref`` processes each, under majority restarts (3 of 5 from
AOF, all 5 from AOF, 3 of 5 empty, in turn) and changes of the locks' ``spec.nodes`` (a node
replaced by a fresh redis-server).

Around both: a real ``redlease operator`` refreshing 53 DistributedLocks (the 13 above and 40
idle ones) in KMock over HTTP (in a process of its own: soak/api.py), and a monitor
(soak/history.py) that long-polls every sidecar for the whole run and checks that no two
sidecars of a lock led at the same time and that tokens only rose.

Reported: the failover time of every transition (SIGKILL to the heir's ``acquired_at``), the
dead time of every hand-off, how long the set took to lead again after each majority restart
and to follow each node-set change, overlaps and token regressions of both parts, RSS and open
file descriptors of every process (from /proc) at its start and at the end, the operator's
asyncio tasks (its /metrics), and whether the operator's statuses name the right holders at the
end. The exit status is 1 if any of these checks failed.

Usage: python soak/soak.py [--minutes N] [--report PATH] [--markdown PATH]
(``SOAK_MINUTES`` in the environment sets the default of --minutes, 20).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

import aiohttp  # noqa: E402

from bench.failover import Sidecar  # noqa: E402
from redlease.core.times import parse_time  # noqa: E402
from redlease.devtools.localredis import RedisServer, free_port  # noqa: E402
from redlease.devtools.operatorprocess import start_operator  # noqa: E402
from soak.common import (  # noqa: E402
    REFRESH,
    TTL,
    Pair,
    create_lock,
    get_json,
    locks_url,
    metrics,
    proc_stats,
    say,
    steady,
    summary,
)
from soak.handoff import HANDOFF_BOUND, HANDOFF_EVERY, HANDOFF_TTL, handoff_killer  # noqa: E402
from soak.history import Monitor  # noqa: E402
from soak.quorum import NAMESPACE as SET_NAMESPACE  # noqa: E402
from soak.quorum import QuorumPart  # noqa: E402
from soak.report import failures, markdown  # noqa: E402

LOCKS = 10  # locks with two sidecars each
IDLE = 40  # DistributedLocks without sidecars, refreshed by the operator too
KILL_EVERY = 30.0  # s between two SIGKILLs of one lock's leader
REDIS_EVERY = 300.0  # s between two restarts of redis-server
WARMUP = 30.0  # s after the start before the "start" figures are taken
POLL = 0.1  # s between two reads of a sidecar's /status while waiting for a take-over
TAKEOVER = 60.0  # s: a take-over not seen within this counts as failed


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
        self.monitor: Monitor | None = None
        self.quorum: QuorumPart | None = None
        self.url = ""  # the API process's

    async def status(self, sc: Sidecar) -> dict[str, Any] | None:
        assert self.session is not None
        doc = await get_json(self.session, f"http://127.0.0.1:{sc.port}/status")
        return doc if isinstance(doc, dict) else None

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

    def spawn(self, pair: Pair, identity: str) -> None:
        assert self.monitor is not None
        self.monitor.watch(pair.lock, pair.start(identity))

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
        assert self.monitor is not None
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
            self.monitor.killed(victim)
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
            say(f"{pair.lock}: {record}")
            del pair.sidecars[victim.identity]
            self.end_life(pair, victim, last)
            self.spawn(pair, victim.identity)

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
            say(f"redis-server restarted: down {up:.2f}s, all led after {all_led:.2f}s")
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

    async def operator_tasks(self, port: int) -> int | None:
        assert self.session is not None
        tasks = (await metrics(self.session, port)).get("redlease_operator_asyncio_tasks")
        return None if tasks is None else int(tasks)

    async def run(self) -> dict[str, Any]:
        self.redis.start()
        self.session = aiohttp.ClientSession()
        self.monitor = Monitor(self.session)
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
            self.quorum = QuorumPart(self.session, self.url, self.monitor)
            return await self._run()
        finally:
            await self.monitor.stop()
            if api.returncode is None:
                api.terminate()
                await api.wait()
            await self.session.close()
            for pair in self.pairs:
                for sc in pair.sidecars.values():
                    sc.stop(signal.SIGTERM)
            if self.quorum is not None:
                self.quorum.stop()
            self.redis.stop()

    def pids(self, operator: Any) -> tuple[int, int | None]:
        """The operator's and redis-server's (its current life's)."""
        return operator.proc.pid, self.redis.proc.pid if self.redis.proc else None

    async def _run(self) -> dict[str, Any]:
        assert self.session is not None
        assert self.monitor is not None
        assert self.quorum is not None
        port = free_port()  # the operator's /metrics
        flags = ("--namespace", SET_NAMESPACE, "--metrics", f"127.0.0.1:{port}")
        operator = await start_operator(self.url, self.work, *flags, refresh=REFRESH)
        try:
            for i in range(LOCKS + IDLE):
                name = f"soak-{i}"
                spec = {"keys": [name], "nodes": [{"url": self.redis.url}], "ttlSeconds": int(TTL)}
                await create_lock(self.session, self.url, name, spec)
            for i in range(LOCKS):
                pair = Pair(f"soak-{i}", self.redis.url)
                for side in ("a", "b"):
                    self.spawn(pair, f"soak-{i}-{side}")
                self.pairs.append(pair)
            await self.quorum.start()
            began = time.monotonic()
            end = began + self.minutes * 60
            say(f"started; the run ends in {self.minutes * 60:g}s")
            for pair in self.pairs:
                sc, _, _ = await self.wait_leader(pair, TAKEOVER)
                assert sc is not None, f"{pair.lock}: no leader at the start"
            assert await self.quorum.led(TAKEOVER), "the RedLock set's locks: no leader"
            await asyncio.sleep(max(0.0, began + WARMUP - time.monotonic()))
            say("every lock has a leader: start figures")
            op_start, redis_start, _ = await asyncio.gather(
                *map(steady, self.pids(operator)), self.quorum.figures("first")
            )
            tasks_start = await self.operator_tasks(port)
            await asyncio.gather(
                *(self.killer(i, p, end) for i, p in enumerate(self.pairs)),
                self.redis_restarter(end),
                handoff_killer(self.redis.port, end, self.handoffs),
                self.quorum.faults(began, end),
            )
            say("end figures")
            op_end, redis_end, _ = await asyncio.gather(
                *map(steady, self.pids(operator)), self.quorum.figures("last")
            )
            tasks_end = await self.operator_tasks(port)
            say("checking the operator's statuses")
            wrong_statuses = await self.statuses_agree(port)
            api_latency = await self.api_latency()
            for pair in self.pairs:
                for sc in pair.sidecars.values():
                    self.sample(sc)
            await self.monitor.stop()
        finally:
            say("stopping the operator")
            code = await operator.stop()
            say(f"operator stopped: exit status {code}")
        took = [f["seconds"] for f in self.failovers if "seconds" in f]
        handoffs = [h["seconds"] for h in self.handoffs if "seconds" in h]
        return {
            "minutes": self.minutes,
            "setup": {
                "locks": LOCKS,
                "sidecars_per_lock": 2,
                "distributed_locks": LOCKS + IDLE + len(self.quorum.pairs),
                "kill_every_s": KILL_EVERY,
                "redis_restart_every_s": REDIS_EVERY,
                "ttl_s": TTL,
                "operator_refresh_s": REFRESH,
                "warmup_s": WARMUP,
                "handoff_every_s": HANDOFF_EVERY,
                "handoff_ttl_s": HANDOFF_TTL,
                "handoff_bound_s": HANDOFF_BOUND,
            },
            "failover_seconds": summary(took),
            "failovers": self.failovers,
            "failed_failovers": [f for f in self.failovers if "failed" in f],
            "skipped_kills": [f for f in self.failovers if "skipped" in f],
            "redis_restarts": self.redis_restarts,
            "handoff_dead_seconds": summary(handoffs),
            "handoffs": self.handoffs,
            "failed_handoffs": [
                h
                for h in self.handoffs
                if "failed" in h or not (h["handed_to_the_dead_waiter"] and h["tokens_rose"])
            ],
            "history": {
                "single_node": self.monitor.verdict(p.lock for p in self.pairs),
                "redlock_set": self.monitor.verdict(self.quorum.locks),
            },
            "redlock_set": self.quorum.report(),
            "operator": {
                "start": op_start,
                "end": op_end,
                "asyncio_tasks_start": tasks_start,
                "asyncio_tasks_end": tasks_end,
                "exit_status": code,
                "statuses_not_naming_the_leader_at_the_end": wrong_statuses,
                "emulator_get_seconds_at_the_end": api_latency,
            },
            "redis": {"start": redis_start, "end": redis_end},
            "sidecar_lives": [life for p in self.pairs for life in p.lives],
        }

    async def statuses_agree(self, port: int) -> dict[str, Any]:
        """Lock -> [leading sidecar, its fencing token, the token in the operator's last status
        of the lock] where these still differ 3 refreshes (and 10 s) after the end; empty when
        the operator has seen every current term (of both parts). Read from the operator's
        /metrics (``redlease_lock_fencing_token``), not from the emulator, which can be slow;
        but the set's few locks from their status (``fencingToken``)."""
        assert self.session is not None
        assert self.quorum is not None
        deadline = time.monotonic() + 3 * REFRESH + 10
        while True:
            tokens: dict[str, Any] = {
                series.split('name="', 1)[1].split('"', 1)[0]: int(value)
                for series, value in (await metrics(self.session, port)).items()
                if series.startswith("redlease_lock_fencing_token{")
            }  # lastFencingToken: the holder's token on one node
            for lock in self.quorum.locks:  # a re-seed raises the set's above it: the status
                obj = await self.quorum.read(lock)
                tokens[lock] = ((obj or {}).get("status") or {}).get("fencingToken")
            wrong: dict[str, Any] = {}
            for pair in [*self.pairs, *self.quorum.pairs]:
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
        if await get_json(self.session, locks_url(self.url, "soak-0"), 10) is None:
            return None
        return round(time.monotonic() - began, 3)


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
    bad = failures(report)
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
