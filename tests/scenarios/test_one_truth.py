"""The seam test of the lock view: every surface says the same thing in the same fault.

A 5-node RedLock set, two sidecars, the operator (kopf against KMock) with a DistributedLock on
the same nodes, and `redlease status`. With 2 nodes killed, the sidecars' /status, state files
and /metrics, `redlease status` and the DistributedLock status all say 3 of 5 healthy within two
retry periods and keep saying it, and all name the same holder and fencing token. A stale
holder on a minority of nodes is named by none of them. With 2 of 3 nodes restarted empty,
every surface says 1 of 3 healthy, the holder unknown, and names both nodes.

N active of M (`--holders 2`, `spec.holders: 2`, on one node and on a RedLock set of 3): each
sidecar's /status (its `holders` and its own `leader` / `fencing_token`), /metrics, state file,
`redlease status` and the DistributedLock's `status.holders` name the same holders and tokens
before a holder is SIGKILLed and after its slot went to a standby; no surface ever names more
than 2 holders, or a set that was never true, or goes back to an older set.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from redlease.core.keys import LockKeys
from redlease.devtools.kubeemulator import Cluster, until
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, Sidecar, env

TTL, DEADLINE, RETRY = 5.0, 3.0, 1.0


def cli_status_doc(
    lock: str, urls: list[str], holders: int = 1, extra: tuple[str, ...] = ()
) -> tuple[int, dict[str, Any]]:
    """`redlease status --json`: (exit code, document, or {"stderr": ...} if none)."""
    args = [sys.executable, "-m", "redlease", "status", "--lock", lock, "--json"]
    args += ["--holders", str(holders), *extra]
    for url in urls:
        args += ["--redis", url]
    out = subprocess.run(args, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=30)
    try:
        doc: dict[str, Any] = json.loads(out.stdout)
    except ValueError:
        doc = {"stderr": out.stderr}
    return out.returncode, doc


def cli_status(lock: str, urls: list[str], holders: int = 1) -> dict[str, Any]:
    code, doc = cli_status_doc(lock, urls, holders)
    assert code == 0, doc
    return doc


def metrics_view(sc: Sidecar) -> dict[str, float]:
    code, text = sc.get("/metrics")
    assert code == 200
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "redlease_nodes":
                out[sample.labels["state"]] = sample.value
            elif sample.name == "redlease_node_rejoins_in_seconds":
                out[f"rejoins_in {sample.labels['node']}"] = sample.value
            elif sample.name == "redlease_fencing_token":
                out["token"] = sample.value
            elif sample.name in (
                "redlease_is_leader",
                "redlease_holders",
                "redlease_holders_limit",
            ):
                out[sample.name.removeprefix("redlease_")] = sample.value
    return out


def surfaces(
    scs: list[Sidecar], cluster: Cluster, name: str, lock: str, urls: list[str]
) -> dict[str, tuple[Any, Any, int]]:
    """(holder, fencing token, healthy nodes) as every surface shows it right now."""
    seen: dict[str, tuple[Any, Any, int]] = {}
    for sc in scs:
        doc = sc.status()
        assert doc is not None
        seen[f"{sc.identity}/status"] = (
            doc["holder"],
            doc["fencing_token"],
            doc["nodes"]["healthy"],
        )
        f = json.loads(sc.state_file.read_text())
        seen[f"{sc.identity}/file"] = (f["holder"], f["fencing_token"], f["nodes"]["healthy"])
        m = metrics_view(sc)
        seen[f"{sc.identity}/metrics"] = (doc["holder"], int(m["token"]) or None, int(m["healthy"]))
    cli = cli_status(lock, urls)
    seen["redlease status"] = (cli["holder"], cli["fencing_token"], cli["nodes"]["healthy"])
    st = cluster.status(name)
    seen["DistributedLock"] = (st.get("holder"), st.get("fencingToken"), st.get("healthyNodes", -1))
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [5], indirect=True)
async def test_every_surface_tells_the_same_truth(
    cluster: Cluster, redis_nodes: list[RedisServer]
) -> None:
    urls = [s.url for s in redis_nodes]
    lock = f"truth-{uuid.uuid4().hex[:8]}"
    await cluster.create("truth", {"keys": [lock], "nodes": [{"url": u} for u in urls]})
    timing = dict(ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY)
    scs = [Sidecar(i, lock, urls, **timing).start() for i in ("pod-a", "pod-b")]  # type: ignore[arg-type]
    try:
        for sc in scs:
            await asyncio.to_thread(sc.wait_up)

        def agreed(healthy: int) -> Callable[[], dict[str, tuple[Any, Any, int]] | None]:
            def check() -> dict[str, tuple[Any, Any, int]] | None:
                seen = surfaces(scs, cluster, "truth", lock, urls)
                values = set(seen.values())
                if len(values) == 1 and next(iter(values))[2] == healthy:
                    ((holder, token, _),) = values
                    return seen if holder in ("pod-a", "pod-b") and token else None
                return None

            return check

        before = await until(lambda: asyncio.to_thread(agreed(5)), timeout=30, what="5/5")
        holder, token, _ = next(iter(before.values()))

        for victim in redis_nodes[3:]:
            victim.kill()
        killed_at = time.monotonic()

        def sidecars_say(healthy: int) -> bool:
            return all(
                (doc := sc.status()) is not None and doc["nodes"]["healthy"] == healthy
                for sc in scs
            )

        await until(lambda: asyncio.to_thread(sidecars_say, 3), timeout=10, what="3/5")
        assert time.monotonic() - killed_at <= 2 * RETRY, "sidecars took over 2 retry periods"
        await until(lambda: asyncio.to_thread(agreed(3)), timeout=10, what="3/5 everywhere")
        # ...and they keep saying it (node health has one writer: no flapping back to 5)
        end = time.monotonic() + 3 * RETRY
        while time.monotonic() < end:
            seen = await asyncio.to_thread(surfaces, scs, cluster, "truth", lock, urls)
            assert set(seen.values()) == {(holder, token, 3)}, seen
            await asyncio.sleep(RETRY / 4)
    finally:
        for sc in scs:
            sc.stop()


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [5], indirect=True)
async def test_a_stale_holder_on_a_minority_is_named_by_no_surface(
    cluster: Cluster, redis_nodes: list[RedisServer]
) -> None:
    urls = [s.url for s in redis_nodes]
    lock = f"ghost-{uuid.uuid4().hex[:8]}"
    keys = LockKeys.for_name(lock)
    client = redis.Redis.from_url(urls[0])
    client.hset(keys.lease, mapping={"owner": "x" * 32, "holder": "phantom-holder", "fence": 99})
    client.pexpire(keys.lease, 60_000)
    client.set(keys.fence, 99)
    client.close()
    await cluster.create("ghost", {"keys": [lock], "nodes": [{"url": u} for u in urls]})
    # a paused sidecar only observes: its view is the lock's, not its own lease
    sc = Sidecar("watcher", lock, urls, ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY,
                 extra=["--paused"]).start()  # fmt: skip
    try:
        await asyncio.to_thread(sc.wait_up)
        await until(lambda: cluster.status("ghost").get("phase") == "Free", timeout=20, what="Free")
        await until(
            lambda: asyncio.to_thread(
                lambda: (sc.status() or {}).get("nodes", {}).get("healthy") == 5
            )
        )
        for _ in range(3):
            doc = sc.status()
            assert doc is not None and doc["holder"] is None and doc["holder_unknown"] is None
            assert json.loads(sc.state_file.read_text())["holder"] is None
            cli = await asyncio.to_thread(cli_status, lock, urls)
            assert cli["holder"] is None and cli["last_fencing_token"] == 99
            assert "holder" not in cluster.status("ghost")
            await asyncio.sleep(RETRY / 2)
        assert "phantom-holder" not in sc.log()
    finally:
        sc.stop()


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [3], indirect=True)
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
async def test_nodes_restarted_empty_do_not_count_on_any_surface(
    cluster: Cluster, redis_nodes: list[RedisServer], strict: bool
) -> None:
    """2 of 3 nodes restarted empty: no leader meanwhile, and every surface says 1 of 3
    healthy, the holder unknown (not free), and names both nodes; `connected` readiness is
    503. By default every surface says when they rejoin by themselves ("rejoins by itself in
    N s", restart_delay 60 s; the metric counts down), and the logs say so once per node. In
    the strict restart mode (``--strict-restart``, ``spec.strictRestart``) they cannot be
    re-seeded, and the logs say what the operator must do, once per node."""
    urls = [s.url for s in redis_nodes]
    lock = f"empty-{uuid.uuid4().hex[:8]}"
    mode = ("--strict-restart",) if strict else ()
    spec: dict[str, Any] = {"keys": [lock], "nodes": [{"url": u} for u in urls]}
    if strict:
        spec["strictRestart"] = True
    await cluster.create("empty", spec)
    timing = dict(ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY)
    scs = [
        Sidecar(i, lock, urls, **timing, extra=mode).start()  # type: ignore[arg-type]
        for i in ("pod-a", "pod-b")
    ]
    lost = {s.address for s in redis_nodes[1:]}
    try:
        for sc in scs:
            await asyncio.to_thread(sc.wait_up)
        await until(
            lambda: any(sc.is_leader() for sc in scs) and cluster.status("empty").get("holder"),
            timeout=30,
            what="a leader",
        )
        for server in redis_nodes[1:]:
            server.restart()  # no persistence: data and markers gone

        def everywhere() -> dict[str, Any] | None:
            seen: dict[str, Any] = {}
            for sc in scs:
                doc = sc.status()
                if doc is None:
                    return None
                seen[f"{sc.identity}/status"] = doc
                seen[f"{sc.identity}/file"] = json.loads(sc.state_file.read_text())
            code, cli = cli_status_doc(lock, urls, extra=mode)
            seen["redlease status"] = cli
            for doc in seen.values():
                if (
                    "nodes" not in doc
                    or doc["nodes"]["healthy"] != 1
                    or doc["holder"] is not None
                    or not doc["holder_unknown"]
                    or set(doc["nodes_not_counting"]) != lost
                    or not all(wanted in w for w in doc["nodes_not_counting"].values())
                ):
                    return None
            st = cluster.status("empty")
            if st.get("healthyNodes") != 1 or set(st.get("unhealthyNodes", ())) != lost:
                return None
            said = " ".join(c.get("message", "") for c in st.get("conditions", ()))
            if not all(f"{node}: restarted without its data; {wanted}" in said for node in lost):
                return None
            seen["DistributedLock"] = st
            seen["cli exit"] = code
            return seen

        wanted = "cannot rejoin by itself" if strict else "rejoins by itself in"
        seen = await until(everywhere, timeout=30, what="1/3 healthy everywhere")
        assert seen["cli exit"] == 1
        assert seen["DistributedLock"]["phase"] == "Unavailable"
        assert "holder" not in seen["DistributedLock"]
        for sc in scs:
            m = metrics_view(sc)
            assert (m["healthy"], m["not_counting"], m["quorum"]) == (1, 2, 2)
            for node in lost:  # seconds to go, or -1: not by itself
                assert (
                    (m[f"rejoins_in {node}"] > 0) if not strict else m[f"rejoins_in {node}"] == -1
                )
            code, body = sc.get("/readyz")
            assert code == 503 and body == {"ready": False, "leader": False}
        # they stay out meanwhile (strict: nothing brings them back by itself); the log says so
        # once per node
        end = time.monotonic() + 3 * RETRY
        while time.monotonic() < end:
            assert all((sc.status() or {}).get("nodes", {}).get("healthy") == 1 for sc in scs)
            await asyncio.sleep(RETRY / 2)
        for sc in scs:
            log = sc.log()
            said = "needs an operator" if strict else "does not count yet"
            for address in lost:
                lines = [line for line in log.splitlines() if said in line and address in line]
                assert len(lines) == 1, lines  # rate-limited: not once per read
                assert ("DEL redlease:node" in lines[0]) == strict
            assert ("needs an operator" in log) == strict
    finally:
        for sc in scs:
            sc.stop()


# --- N active of M: one holder set on every surface ------------------------------------------

HOLDERS = 2
Pairs = frozenset[tuple[str, int]]  # (holder, fencing token) of every holder a surface names


def pairs(entries: Any, token: str = "fencing_token") -> Pairs:
    """The holders of a `holders` list (snake_case documents; the CR's: ``fencingToken``)."""
    return frozenset((h["holder"], h[token]) for h in entries or ())


@dataclass(frozen=True)
class Counted:
    """What a surface that cannot list the holders says of them: how many, the limit, whether
    this sidecar is one, and the token it shows (its own while it leads; 0: none). /metrics
    (`redlease_holders`, `redlease_holders_limit`, `redlease_is_leader`,
    `redlease_fencing_token`), and /status's and the state file's own fields."""

    identity: str
    count: int
    limit: int
    leader: bool
    token: int

    def fits(self, holders: Pairs) -> bool:
        own = {token for who, token in holders if who == self.identity}
        if self.leader:
            shown = own == {self.token}
        else:  # a standby shows the holder the view names (or none): one of them
            shown = not own and self.token in {0, *(token for _, token in holders)}
        return shown and self.count == len(holders) and self.limit == HOLDERS


def counted(identity: str, doc: Mapping[str, Any]) -> Counted:
    return Counted(identity, len(doc["holders"]), doc["holders_limit"], doc["leader"],
                   doc["fencing_token"] or 0)  # fmt: skip


Seen = Pairs | Counted


def holder_surfaces(scs: list[Sidecar], cluster: Cluster, name: str) -> dict[str, Seen]:
    """The holders as every surface but `redlease status` shows them right now."""
    seen: dict[str, Seen] = {}
    for sc in scs:
        doc = sc.status()
        assert doc is not None, sc.identity
        seen[f"{sc.identity}/status"] = pairs(doc["holders"])
        seen[f"{sc.identity}/status leader"] = counted(sc.identity, doc)
        written = json.loads(sc.state_file.read_text())
        seen[f"{sc.identity}/file"] = pairs(written["holders"])
        seen[f"{sc.identity}/file leader"] = counted(sc.identity, written)
        m = metrics_view(sc)
        seen[f"{sc.identity}/metrics"] = Counted(
            sc.identity, int(m["holders"]), int(m["holders_limit"]), m["is_leader"] == 1,
            int(m["token"]),
        )  # fmt: skip
    seen["DistributedLock"] = pairs(cluster.status(name).get("holders"), "fencingToken")
    return seen


@dataclass
class Readings:
    """Every reading of every surface (when it began, monotonic), in order."""

    lock: str
    urls: list[str]
    name: str
    cluster: Cluster
    log: list[tuple[float, str, Seen]]

    async def agreed(self, scs: list[Sidecar]) -> Pairs | None:
        """One pass: `redlease status` (a process of its own) while the other surfaces are
        read again and again, then once more after it answered; the holders if every reading
        of the pass named the same ones (the fast surfaces agree before and after the CLI's
        read), else None."""
        cli = asyncio.create_task(asyncio.to_thread(cli_status, self.lock, self.urls, HOLDERS))
        cli_at = time.monotonic()
        passes: list[dict[str, Seen]] = []
        while True:
            done = cli.done()
            at = time.monotonic()
            seen = await asyncio.to_thread(holder_surfaces, scs, self.cluster, self.name)
            self.log += [(at, surface, s) for surface, s in seen.items()]
            passes.append(seen)
            if done:
                break
        doc = await cli
        self.log.append((cli_at, "redlease status", pairs(doc["holders"])))
        listed = [s for seen in passes for s in seen.values() if isinstance(s, frozenset)]
        holders = pairs(doc["holders"])
        if any(s != holders for s in listed):
            return None
        counts = [s for seen in passes for s in seen.values() if isinstance(s, Counted)]
        return holders if all(c.fits(holders) for c in counts) else None

    def check(self, history: list[Pairs], since: float) -> None:
        """No surface ever named more than HOLDERS holders; from ``since`` on, every reading is
        one of ``history`` (the sets that were true, in order), and no listing goes back."""
        at_most = [(surface, s) for _, surface, s in self.log
                   if (len(s) if isinstance(s, frozenset) else s.count) > HOLDERS]  # fmt: skip
        assert at_most == [], at_most
        reached: dict[str, int] = {}
        for at, surface, s in self.log:
            if at < since:
                continue
            if isinstance(s, Counted):
                assert any(s.fits(h) for h in history), (surface, s, history)
                continue
            assert s in history, (surface, sorted(s), [sorted(h) for h in history])
            step = history.index(s)
            assert step >= reached.get(surface, 0), (surface, "went back to", sorted(s))
            reached[surface] = step


@pytest.mark.slow
@pytest.mark.parametrize("redis_nodes", [1, 3], indirect=True, ids=["one-node", "redlock-3"])
async def test_every_surface_names_the_same_holders_before_and_after_a_holder_dies(
    cluster: Cluster, redis_nodes: list[RedisServer]
) -> None:
    """`--holders 2`, 3 sidecars: /status, /metrics, the state files, `redlease status` and the
    DistributedLock's `status.holders` agree on the 2 holders; after a SIGKILL of one (its slot
    expires with its TTL) they agree on the survivor and the standby that took the slot, and
    no surface ever named a set that was not true (at most 2; never the dead holder beside
    its successor; never back to the old set)."""
    ttl, deadline, retry = 3.0, 2.0, 0.2
    urls = [s.url for s in redis_nodes]
    lock = f"slots-{uuid.uuid4().hex[:8]}"
    name = "slots"
    await cluster.create(
        name, {"keys": [lock], "holders": HOLDERS, "nodes": [{"url": u} for u in urls]}
    )
    scs = [Sidecar(f"pod-{i}", lock, urls, ttl=ttl, renew_deadline=deadline, retry_period=retry,
                   extra=["--holders", str(HOLDERS)]).start() for i in range(3)]  # fmt: skip
    readings = Readings(lock, urls, name, cluster, [])
    try:
        for sc in scs:
            await asyncio.to_thread(sc.wait_up)
        t0 = time.monotonic()

        async def settle(live: list[Sidecar], what: str, timeout: float, old: Pairs) -> Pairs:
            """The holders once every surface names the same HOLDERS, other than ``old``."""
            end = time.monotonic() + timeout
            while True:
                holders = await readings.agreed(live)
                if holders is not None and len(holders) == HOLDERS and holders != old:
                    return holders
                assert time.monotonic() < end, f"no agreement on {what} in {timeout}s"

        first = await settle(scs, "the first holders", 30, frozenset())
        since = time.monotonic()
        victim_name, victim_token = min(first)
        victim = next(sc for sc in scs if sc.identity == victim_name)
        live = [sc for sc in scs if sc is not victim]
        victim.signal(signal.SIGKILL)
        killed = time.monotonic()
        await asyncio.to_thread(victim.wait)
        after = await settle(live, "the holders after the kill", 4 * ttl + 10, first)
        settled = time.monotonic() - killed
        survivor = first - {(victim_name, victim_token)}
        ((heir, heir_token),) = after - survivor
        assert survivor < after and heir != victim_name, (sorted(first), sorted(after))
        assert heir_token > max(token for _, token in first)
        readings.check([first, survivor, after], since)
        # the dead holder's slot lived on until its lease could expire, and no surface named
        # it a TTL after that (a generous bound: the surfaces read every 0.2-0.3 s)
        stale = [(round(at - killed, 2), surface) for at, surface, s in readings.log
                 if at > killed + 2 * ttl and isinstance(s, frozenset)
                 and victim_name in {who for who, _ in s}]  # fmt: skip
        assert stale == [], stale
        print(f"{len(redis_nodes)} node(s): every surface agreed {settled:.2f} s after the "
              f"SIGKILL (TTL {ttl} s), {time.monotonic() - t0:.1f} s in all")  # fmt: skip
        assert settled > ttl - deadline
    finally:
        for sc in scs:
            sc.stop()
