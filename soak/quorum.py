"""The soak's second part: a 5-node RedLock set under majority restarts and node-set changes.

Five persistent redis-servers (``appendonly yes``, ``appendfsync always``), SET_LOCKS
DistributedLocks on them in KMock, and two ``redlease sidecar --lock-ref`` processes per lock:
they read the nodes and timing from their DistributedLock and follow its changes. The
operator refreshes these locks with the others. Faults, one at a time:

* A majority restart, the kinds in turn: 3 of the 5 nodes SIGKILLed and restarted from their
  AOF; all 5 at once from their AOF; 3 of 5 restarted empty (AOF and RDB deleted). Each such
  node is fresh to redlease (its marker names an earlier server run: docs/quorum.md, "The
  restart rule"), so the set has no quorum until the nodes have been up for ``restart_delay``
  (RESTART_DELAY, the library's default: the sidecar has no flag for it), then comes back by
  itself, re-seeded. Measured per lock: from the restart to the ``acquired_at`` of the first
  term whose token is above every token of the lock before it; failed beyond LED_AGAIN_BOUND.
  Checked after the run: no term acquired after the restart has a token at or below those.
* A node-set change: one node of the set, in every DistributedLock's ``spec.nodes``, is
  replaced by a fresh redis-server (the replaced one is stopped once everyone followed).
  Measured from the patches' answers: until the operator's status names the new set for the
  new generation (failed beyond FOLLOW_BOUND, or on an Invalid status meanwhile), until a
  sidecar of every lock leads on it with a token above every token before (failed beyond
  LEAD_BOUND); from then, until the operator's status names that leader and token (failed
  beyond FOLLOW_BOUND). The statuses are read from KMock: its latency counts in.

The first round runs the three restarts back to back from FIRST_AT s after the start, then a
node-set change, so that a 5-minute run has each; after it, every BETWEEN s after the previous
fault ended, a restart (the next kind) and a node-set change in turn. A fault starts only if
its bound ends before the run does.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.failover import Sidecar
from redlease.core.rules import RESTART_DELAY
from redlease.devtools.localredis import RedisServer
from redlease.kube.spec import parse_spec
from soak.common import TTL, Pair, create_lock, get_json, locks_url, say, steady
from soak.history import Monitor

SET_NODES = 5
# the set's DistributedLocks live in a namespace of their own: KMock does not filter a watch by
# its fieldSelector, so the sidecars' watches would carry every status write of the other 50
NAMESPACE = "soak-set"
SET_LOCKS = 3  # locks on the set, two sidecars each
FIRST_AT = 40.0  # s after the start: the first majority restart (10 s after the warm-up)
PAUSE = 5.0  # s between two faults of the first round
BETWEEN = 150.0  # s between the end of a fault and the next one, after the first round
KINDS = (  # (name, which of the set's nodes, empty)
    ("3 of 5 from AOF", (0, 1, 2), False),
    ("all 5 from AOF", (0, 1, 2, 3, 4), False),
    ("3 of 5 empty", (2, 3, 4), True),
)
# A restarted node counts again once up for restart_delay (its uptime in whole seconds: one
# more); the sidecar then retries within its back-off after an outage, at most min(ttl, 10 s)
LED_AGAIN_BOUND = RESTART_DELAY + 1.0 + min(TTL, 10.0) + 5.0  # + 5 s for a busy machine
# s: three operator refreshes, + 15 s for KMock's latency (seconds a request late in a run)
FOLLOW_BOUND = 3 * 1.0 + 15.0
LEAD_BOUND = 2 * TTL + 15.0  # s: the sidecars read the change, step down, one leads again


@dataclass
class Member:
    """One redis-server of the set: its figures of its first life (after the warm-up, or when
    it joined) and of its last one (at the end, or when it was replaced)."""

    server: RedisServer
    first: dict[str, int] | None = None
    last: dict[str, int] | None = None
    lives: int = 1
    replaced: bool = False

    @property
    def pid(self) -> int | None:
        return self.server.proc.pid if self.server.proc else None

    def figures(self) -> dict[str, Any]:
        return {"url": self.server.url, "lives": self.lives, "replaced": self.replaced,
                "first": self.first, "last": self.last}  # fmt: skip


class QuorumPart:
    def __init__(self, session: aiohttp.ClientSession, api: str, monitor: Monitor) -> None:
        self.session = session
        self.api = api
        self.monitor = monitor
        self.members: list[Member] = []
        self.gone: list[Member] = []  # replaced by a node-set change
        self.pairs: list[Pair] = []
        self.restarts: list[dict[str, Any]] = []
        self.node_changes: list[dict[str, Any]] = []

    @property
    def locks(self) -> list[str]:
        return [p.lock for p in self.pairs]

    def spec(self) -> dict[str, Any]:
        return {"nodes": [{"url": m.server.url} for m in self.members], "ttlSeconds": int(TTL)}

    async def start(self) -> None:
        """The servers, the DistributedLocks and their sidecars."""
        self.members = [Member(RedisServer(persistent=True).start()) for _ in range(SET_NODES)]
        for i in range(SET_LOCKS):
            lock = f"soak-set-{i}"
            spec = {"keys": [lock], **self.spec()}
            await create_lock(self.session, self.api, lock, spec, NAMESPACE)
            source = ["--lock-ref", f"{NAMESPACE}/{lock}", "--kube-api", self.api]
            pair = Pair(lock, source=source)
            for side in ("a", "b"):
                self.monitor.watch(lock, pair.start(f"{lock}-{side}"))
            self.pairs.append(pair)

    async def led(self, timeout: float) -> bool:
        return await self.monitor.wait(lambda: all(map(self.monitor.leader, self.locks)), timeout)

    async def figures(self, which: str) -> None:
        """``which``: "first" (after the warm-up) or "last" (at the end)."""
        stats = await asyncio.gather(*(steady(m.pid) for m in self.members))
        for member, figure in zip(self.members, stats, strict=True):
            setattr(member, which, figure)

    def stop(self) -> None:
        for pair in self.pairs:
            for sc in pair.sidecars.values():
                sc.stop(signal.SIGTERM)
        for member in self.members:
            member.server.stop()

    # -- the faults -------------------------------------------------------------------------

    async def faults(self, began: float, end: float) -> None:
        """The schedule of the module doc (``began``, ``end``: the run's, monotonic)."""
        at = began + FIRST_AT
        steps = [self.restart] * len(KINDS) + [self.change_nodes]
        n = 0
        while True:
            step = steps[n] if n < len(steps) else (self.restart, self.change_nodes)[n % 2]
            bound = LED_AGAIN_BOUND if step == self.restart else FOLLOW_BOUND + LEAD_BOUND
            if at + bound > end:
                return
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            await step()
            n += 1
            at = time.monotonic() + (PAUSE if n < len(steps) else BETWEEN)

    async def restart(self) -> None:
        name, nodes, empty = KINDS[len(self.restarts) % len(KINDS)]
        before = {lock: self.monitor.max_token(lock) for lock in self.locks}
        killed = time.time()
        for i in nodes:
            self.members[i].server.kill()
            if empty:
                self.members[i].server.wipe()
        await asyncio.sleep(0.3)  # down for a moment, as in chaos/runner.py
        restarted = time.time()
        for i in nodes:  # in this thread: the die-with-parent link is the starting thread's
            self.members[i].server.start()
            self.members[i].lives += 1
        up = time.time() - restarted

        def above() -> bool:
            return all(self.monitor.first_above(lock, before[lock]) for lock in self.locks)

        await self.monitor.wait(above, LED_AGAIN_BOUND + 10.0)
        record: dict[str, Any] = {
            "kind": name,
            "killed_at": killed,
            "restart_seconds": round(up, 3),
            "tokens_before": before,
            "led_again_after": {},
        }
        for lock in self.locks:
            term = self.monitor.first_above(lock, before[lock])
            led = None if term is None else round(term.start - restarted, 3)
            record["led_again_after"][lock] = led
        slow = {
            lock: led
            for lock, led in record["led_again_after"].items()
            if led is None or led > LED_AGAIN_BOUND
        }
        if slow:
            record["failed"] = f"not led again within {LED_AGAIN_BOUND:g}s: {slow}"
        self.restarts.append(record)
        say(f"RedLock set, {name}: led again after {record['led_again_after']}")

    async def change_nodes(self) -> None:
        """Replace one node of the set by a fresh redis-server in every DistributedLock."""
        k = len(self.node_changes) % SET_NODES
        old, fresh = self.members[k], Member(RedisServer(persistent=True).start())
        self.members[k] = fresh
        before = {lock: self.monitor.max_token(lock) for lock in self.locks}
        spec = self.spec()
        expected = ",".join(parse_spec({"keys": ["x"], **spec}).node_names)
        began = time.monotonic()
        patch = {"spec": {"nodes": spec["nodes"]}}
        answers = await asyncio.gather(*(self._patch(lock, patch) for lock in self.locks))
        generations = dict(zip(self.locks, answers, strict=True))
        patched = time.monotonic()
        record: dict[str, Any] = {"replaced": old.server.url, "by": fresh.server.url,
                                  "patched_in": round(patched - began, 3)}  # fmt: skip

        def follows(status: dict[str, Any], lock: str) -> bool:
            return (
                status.get("nodeSet") == expected
                and (status.get("observedGeneration") or 0) >= generations[lock]
            )

        seen, invalid, slowest = await self._operator(follows, FOLLOW_BOUND)
        record.update(operator_followed_after=seen, invalid_statuses=invalid)

        def moved() -> bool:
            return all(self.monitor.first_above(lock, before[lock]) for lock in self.locks)

        led = await self.monitor.wait(moved, max(0.0, patched + LEAD_BOUND - time.monotonic()))
        record["sidecars_led_again_after"] = round(time.monotonic() - patched, 3) if led else None

        def names(status: dict[str, Any], lock: str) -> bool:
            term = self.monitor.leader(lock, before[lock])
            holder = None if term is None else (term.proc.split("#")[0], term.token)
            return holder == (status.get("holder"), status.get("fencingToken"))

        named, _, slower = await self._operator(names, FOLLOW_BOUND)
        record["operator_named_the_leaders_after"] = named
        record["emulator_slowest_get_s"] = max(slowest, slower)
        checks = {
            "the operator did not follow": _late(seen),
            "Invalid statuses": bool(invalid),
            "the sidecars did not lead on the new set": not led,
            "the operator did not name the new leaders": _late(named),
        }
        problems = [what for what, bad in checks.items() if bad]
        if problems:
            record["failed"] = "; ".join(problems)
            record["seen"] = await self._diagnose()
        old.last = await steady(old.pid, 4)
        old.replaced = True
        old.server.stop()
        self.gone.append(old)
        fresh.first = await steady(fresh.pid, 4)
        self.node_changes.append(record)
        say(f"RedLock set, node-set change: {record}")

    async def read(self, lock: str) -> Any:
        """The DistributedLock as KMock has it (None: no answer within 10 s)."""
        return await get_json(self.session, locks_url(self.api, lock, NAMESPACE), 10.0)

    async def _diagnose(self) -> dict[str, Any]:
        """What the API and the sidecars say about a node-set change that was not followed."""
        out: dict[str, Any] = {}
        for pair in self.pairs:
            obj = await self.read(pair.lock) or {}
            status = obj.get("status") or {}
            out[pair.lock] = {
                "spec_nodes": [n.get("url") for n in (obj.get("spec") or {}).get("nodes", [])],
                "generation": (obj.get("metadata") or {}).get("generation"),
                "status": {k: status.get(k) for k in ("phase", "nodeSet", "observedGeneration")},
                "sidecar_logs": {sc.identity: _log_lines(sc) for sc in pair.sidecars.values()},
            }
        return out

    async def _patch(self, lock: str, patch: dict[str, Any]) -> int:
        """Merge-patch a DistributedLock; its new ``metadata.generation``."""
        headers = {"Content-Type": "application/merge-patch+json"}
        url = locks_url(self.api, lock, NAMESPACE)
        async with self.session.patch(url, json=patch, headers=headers) as r:
            assert r.status == 200, await r.text()
            return int((await r.json())["metadata"]["generation"])

    async def _operator(
        self, ok: Callable[[dict[str, Any], str], bool], timeout: float
    ) -> tuple[dict[str, float | None], list[dict[str, Any]], float]:
        """Seconds until the operator's status of each lock satisfied ``ok(status, lock)``
        (None: not seen within ``timeout``; the locks are read together, twice a second), the
        Invalid statuses read meanwhile and the slowest read (KMock's latency)."""
        began = time.monotonic()
        seen: dict[str, float | None] = dict.fromkeys(self.locks)
        invalid: list[dict[str, Any]] = []
        slowest = 0.0

        async def read(lock: str) -> None:
            nonlocal slowest
            sent = time.monotonic()
            obj = await self.read(lock)
            slowest = max(slowest, round(time.monotonic() - sent, 3))
            status = (obj or {}).get("status") or {}
            if status.get("phase") == "Invalid":
                invalid.append({"lock": lock, "status": status})
            if ok(status, lock):
                seen[lock] = round(time.monotonic() - began, 3)

        while None in seen.values() and time.monotonic() - began < timeout:
            await asyncio.gather(*(read(lock) for lock, at in seen.items() if at is None))
            await asyncio.sleep(0.5)
        return seen, invalid, slowest

    # -- the report ----------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        for record in self.restarts:  # every token after the restart above every one before
            record["terms_after_not_above"] = sum(
                1
                for t in self.monitor.terms
                if t.lock in record["tokens_before"]
                and t.start > record["killed_at"]
                and t.token <= record["tokens_before"][t.lock]
            )
        exited = [sc.identity for p in self.pairs for sc in p.sidecars.values()
                  if sc.proc.poll() is not None]  # fmt: skip
        return {
            "setup": {
                "nodes": SET_NODES,
                "locks": SET_LOCKS,
                "sidecars_per_lock": 2,
                "restart_delay_s": RESTART_DELAY,
                "led_again_bound_s": LED_AGAIN_BOUND,
                "follow_bound_s": FOLLOW_BOUND,
                "lead_bound_s": LEAD_BOUND,
                "first_at_s": FIRST_AT,
                "between_s": BETWEEN,
            },
            "restarts": self.restarts,
            "failed_restarts": [
                r for r in self.restarts if "failed" in r or r["terms_after_not_above"]
            ],
            "node_changes": self.node_changes,
            "failed_node_changes": [c for c in self.node_changes if "failed" in c],
            "sidecars_exited": exited,
            "servers": [m.figures() for m in [*self.gone, *self.members]],
        }


def _late(seconds: dict[str, float | None]) -> bool:
    """Whether a lock was not seen within FOLLOW_BOUND."""
    return any(at is None or at > FOLLOW_BOUND for at in seconds.values())


def _log_lines(sc: Sidecar, keep: int = 8) -> list[str]:
    """The sidecar's last log lines about its configuration and the Kubernetes API."""
    try:
        text = (sc.state_dir / "sidecar.log").read_text(errors="replace")
    except OSError:
        return []
    words = ("configuration", "DistributedLock", "kube", "error", "warning")
    return [line[:300] for line in text.splitlines() if any(w in line for w in words)][-keep:]
