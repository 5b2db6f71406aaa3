"""Runs chaos scenarios: starts Redis nodes, the resource and the clients, injects faults,
collects the histories and checks them.

Everything a scenario starts is stopped and its work directory removed when it ends, also when
it fails or is interrupted (Ctrl-C; SIGTERM is turned into the same by ``python -m chaos``).
Child processes die with the runner even when it is SIGKILLed (Linux ``PDEATHSIG``), and the
work directories such a run leaves behind (``chaos-<pid>-*`` of a process that no longer
exists) are removed by the next run.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from chaos.checker import Claim, Sample, Verdict, check
from chaos.clock import now
from chaos.resource import Resource
from redlease.devtools.localredis import RedisServer, die_with_parent, free_port
from redlease.devtools.netfault import DelayProxy
from redlease.sidecar.statefile import until_epoch

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    """One scenario in progress: its processes, servers and fault counters."""

    name: str
    nodes: list[RedisServer]
    resource: RedisServer
    workdir: Path
    ttl: float
    duration: float
    fenced: bool = True
    give_up: float = 0.0  # clients give up acquiring after a random 0..give_up s (0: 1 s)
    limit: int = 1  # the clients' lock: a mutex, or a counting semaphore of this limit
    urls: list[str] = field(default_factory=list)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    proxies: list[DelayProxy] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    tmpfs: bool = False  # every sidecar's state directory is a tmpfs of its own
    volumes: dict[str, Path] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    next_id: int = 0
    restart_delay: float = 0.0  # the clients' node set restart_delay (0: the library's)
    led_again: list[float] = field(default_factory=list)  # seconds from a restart to a new lease
    stuck: int = 0  # restarts after which nobody led again within restart_delay + a margin

    def spawn_client(self, **overrides: Any) -> str:
        who = f"c{self.next_id}"
        self.next_id += 1
        cfg = {
            "id": who,
            "urls": self.urls,
            "lock": "chaos",
            "ttl": self.ttl,
            "resource_port": self.resource.port,
            "fenced": self.fenced,
            "limit": self.limit,
            "duration": self.duration,
            "writes": 3,
            "work": 0.01,
            "give_up": self.give_up,
            "restart_delay": self.restart_delay,
            "history": str(self.workdir / f"{who}.jsonl"),
            **overrides,
        }
        env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'src'}")
        self.procs[who] = subprocess.Popen(
            [sys.executable, "-m", "chaos.client", json.dumps(cfg)],
            env=env, cwd=ROOT, preexec_fn=die_with_parent(),
        )  # fmt: skip
        return who

    def spawn_sidecar(self) -> str:
        who = f"s{self.next_id}"
        self.next_id += 1
        port = free_port()
        state_dir = self.workdir / who
        if self.tmpfs:
            state_dir.mkdir()
            mount_tmpfs(state_dir)
            self.volumes[who] = state_dir
        args = [
            sys.executable, "-m", "redlease", "sidecar",
            "--lock", "chaos", "--ttl", str(self.ttl), "--identity", who,
            "--http", f"127.0.0.1:{port}", "--state-dir", str(state_dir),
            "--log-level", "error",
        ]  # fmt: skip
        for url in self.urls:
            args += ["--redis", url]
        env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'src'}")
        self.procs[who] = subprocess.Popen(
            args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
        )  # fmt: skip
        self.ports[who] = port  # last: the observer thread samples what has a port
        return who

    def observe(self, stop: threading.Event) -> None:
        """Sample every sidecar's /status in turn until ``stop``; a paused one just times out.

        Each sample is stamped with the interval [request sent, answer received]: the sidecar
        computed its answer somewhere inside it (see :mod:`chaos.checker`).
        """
        conns: dict[str, http.client.HTTPConnection] = {}
        while not stop.is_set():
            for who, port in list(self.ports.items()):
                proc = self.procs.get(who)
                if proc is None or proc.poll() is not None:
                    continue
                conn = conns.get(who) or http.client.HTTPConnection("127.0.0.1", port, timeout=0.2)
                conns[who] = conn
                t0 = now()
                try:
                    conn.request("GET", "/status")
                    body = json.loads(conn.getresponse().read())
                except (OSError, ValueError, http.client.HTTPException):
                    conn.close()
                    conns.pop(who, None)
                    continue
                t1 = now()
                self.samples.append(
                    (t0, t1, who, bool(body.get("leader")), body.get("fencing_token"))
                )
            time.sleep(0.002)
        for conn in conns.values():
            conn.close()

    def holder(self) -> str | None:
        for node in self.nodes:
            try:
                c = node.client(socket_timeout=0.5)
                value = c.hget("redlease:{chaos}", "holder")
                c.close()
            except redis.RedisError:
                continue
            if value:
                return value.decode()
        return None

    def wait_for_holder(self, timeout: float = 5.0) -> str | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            who = self.holder()
            if who and who in self.procs and self.procs[who].poll() is None:
                return who
            time.sleep(0.01)
        return None

    def count(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


# --- faults ----------------------------------------------------------------------------------


def pause_holder(run: Run, pause: float) -> None:
    who = run.wait_for_holder()
    if who is None:
        return
    pid = run.procs[who].pid
    os.kill(pid, signal.SIGSTOP)
    run.count("holder_paused")
    time.sleep(pause)  # the fault itself: a pause of this length
    os.kill(pid, signal.SIGCONT)


def kill_holder(run: Run, sig: int = signal.SIGKILL) -> None:
    who = run.wait_for_holder()
    if who is None:
        return
    run.procs[who].send_signal(sig)
    run.count("holder_killed" if sig == signal.SIGKILL else "holder_terminated")
    if who.startswith("s"):
        run.spawn_sidecar()
    else:
        run.spawn_client()


def fault_waiter(run: Run, sig: int) -> None:
    """SIGKILL (and replace) or SIGSTOP for 2.5 TTL a client that is waiting, not holding: with
    the direct hand-off the lease may be granted to it meanwhile, and must not be stranded."""
    holder = run.wait_for_holder()
    waiting = [w for w, p in run.procs.items() if w != holder and p.poll() is None]
    if holder is None or not waiting:
        return
    who = random.choice(waiting)
    if sig == signal.SIGSTOP:
        os.kill(run.procs[who].pid, signal.SIGSTOP)
        run.count("waiter_paused")
        time.sleep(run.ttl * 2.5)  # the fault itself: a pause of this length
        os.kill(run.procs[who].pid, signal.SIGCONT)
        return
    run.procs[who].kill()
    run.count("waiter_killed")
    run.spawn_client()


def mount_tmpfs(path: Path) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "chaos", str(path)], check=True)


def can_mount() -> bool:
    """A tmpfs can be mounted (root, and not in a container that forbids it)."""
    probe = Path(tempfile.mkdtemp(prefix="chaos-mount-probe-"))
    try:
        mount_tmpfs(probe)
    except (OSError, subprocess.CalledProcessError):
        return False
    finally:
        subprocess.run(["umount", str(probe)], capture_output=True, check=False)
        probe.rmdir()
    return True


def published_claim(state_file: Path) -> Claim | None:
    """The leader claim in a sidecar's state file, ending (at the earliest) at its
    ``leader_until`` put on the chaos clock; ``None`` if it claims nothing."""
    try:
        doc = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    until = until_epoch(doc.get("leader_until"))
    token = doc.get("fencing_token")
    if doc.get("leader") is not True or until is None or not isinstance(token, int):
        return None
    mono = now()
    return Claim(mono + until - time.time(), token)  # the wall clock is read after ``mono``


def freeze_holder_volume(run: Run) -> None:
    """Remount the leading sidecar's state volume read-only, let it renew a while (unpublished),
    then SIGTERM it and start a replacement: its state file now holds a claim it cannot
    withdraw, and no other sidecar may lead before that claim runs out."""
    who = run.wait_for_holder()
    if who is None:
        return
    subprocess.run(["mount", "-o", "remount,ro", str(run.volumes[who])], check=True)
    run.count("volume_read_only")
    time.sleep(random.uniform(0.05, 0.3))  # the fault itself: renewals it cannot publish
    claim = published_claim(run.volumes[who] / "chaos.json")
    if claim is not None:
        run.claims.append(claim)
    run.procs[who].send_signal(signal.SIGTERM)
    run.count("holder_terminated")
    run.spawn_sidecar()


def restart_node(run: Run, index: int, down: float) -> None:
    run.nodes[index].kill()
    run.count("node_killed")
    time.sleep(down)
    run.nodes[index].start()
    run.count("node_restarted")


# --- scenarios -------------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    description: str
    inject: Callable[[Run, bool], None]
    nodes: int = 1
    clients: int = 4
    ttl: float = 0.5
    fenced: bool = True
    persistent: bool = True
    quick: bool = True
    expect_safe: bool = True  # zero stale writes accepted and zero token regressions
    give_up: float = 0.0  # clients give up acquiring after a random 0..give_up s (0: 1 s)
    sidecars: bool = False  # the clients are leader-election sidecars, sampled on /status
    tmpfs: bool = False  # each sidecar's state directory is a tmpfs of its own (needs root)
    limit: int = 1  # clients hold a counting semaphore of this limit (1: a mutex)
    restart_delay: float = 0.0  # the clients' node set restart_delay (0: the library's)


def _pauses(run: Run, quick: bool) -> None:
    for _ in range(3 if quick else 10):
        time.sleep(random.uniform(0.2, 0.5))
        pause_holder(run, run.ttl * 2.5)


def _kills(run: Run, quick: bool) -> None:
    for _ in range(3 if quick else 10):
        time.sleep(random.uniform(0.2, 0.5))
        kill_holder(run)


def _semaphore_faults(run: Run, quick: bool) -> None:
    """Pauses past the TTL and crashes of holders of a counting semaphore (the holder of its
    slot 0: one of the limit holders)."""
    for _ in range(2 if quick else 6):
        time.sleep(random.uniform(0.2, 0.5))
        pause_holder(run, run.ttl * 2.5)
        time.sleep(random.uniform(0.2, 0.5))
        kill_holder(run)


def _handoff_faults(run: Run, quick: bool) -> None:
    for _ in range(2 if quick else 6):
        time.sleep(random.uniform(0.1, 0.3))
        fault_waiter(run, signal.SIGKILL)
        time.sleep(random.uniform(0.1, 0.3))
        fault_waiter(run, signal.SIGSTOP)
        time.sleep(random.uniform(0.1, 0.3))
        kill_holder(run)


def _node_restarts(run: Run, quick: bool) -> None:
    for _ in range(1 if quick else 3):
        time.sleep(random.uniform(0.5, 1.0))
        restart_node(run, 0, 0.3)


def _slow_node(run: Run, quick: bool) -> None:
    proxy = run.proxies[0]
    for _ in range(2 if quick else 6):
        time.sleep(0.5)
        proxy.delay = run.ttl / 3
        run.count("node_slowed")
        time.sleep(1.0)
        proxy.delay = 0.0
        proxy.cut()
        run.count("node_cut_off")
        time.sleep(0.5)
        proxy.restore()
    pause_holder(run, run.ttl * 2.5)


def fence_max(run: Run) -> int:
    """The highest fence counter of the lock on any node that answers."""
    top = 0
    for node in run.nodes:
        try:
            c = node.client(socket_timeout=0.5)
            value = c.get("redlease:{chaos}:fence")
            c.close()
        except redis.RedisError:
            continue
        top = max(top, int(value or 0))
    return top


def lease_above(run: Run, token: int) -> bool:
    """A lease with a token above ``token`` is on a quorum of the nodes (a new holder leads)."""
    seen = 0
    for node in run.nodes:
        try:
            c = node.client(socket_timeout=0.5)
            value = c.hget("redlease:{chaos}", "fence")
            c.close()
        except redis.RedisError:
            continue
        seen += value is not None and int(value) > token
    return seen > len(run.nodes) // 2


def wait_led_again(run: Run, token: int, since: float) -> None:
    """Record how long after ``since`` a lease above ``token`` stood on a quorum; count the
    restart as stuck if none did within restart_delay + 5 s (a retry period and a margin for
    a busy machine)."""
    end = since + run.restart_delay + 5.0
    while now() < end:
        if lease_above(run, token):
            run.led_again.append(round(now() - since, 2))
            return
        time.sleep(0.02)
    run.stuck += 1


def majority_restart(run: Run, nodes: list[int], empty: bool = False) -> None:
    """SIGKILL ``nodes`` (a majority), restart them from their AOF (or ``empty``: their AOF
    deleted), and wait until a new holder leads: by itself, no operator's step (issue 36).
    The highest token is read before the kill (with a majority down no new one is granted;
    a dead node costs a client its connect retries)."""
    token = fence_max(run)
    for i in nodes:
        run.nodes[i].kill()
        run.count("node_killed")
        if empty:
            run.nodes[i].wipe()
    time.sleep(0.3)
    since = now()
    for i in nodes:
        run.nodes[i].start()
        run.count("node_restarted_empty" if empty else "node_restarted")
    wait_led_again(run, token, since)


def _majority_restarts(run: Run, quick: bool) -> None:
    time.sleep(0.3)
    majority_restart(run, [0, 1, 2])  # 3 of 5 from AOF: 2 intact nodes, 3 needed to re-seed
    time.sleep(1.0)
    majority_restart(run, [0, 1, 2, 3, 4])  # all 5 at once, from AOF
    time.sleep(1.0)
    majority_restart(run, [2, 3, 4], empty=True)  # 3 of 5 without their data


def _quorum_losses(run: Run, quick: bool) -> None:
    time.sleep(0.5)
    for i in (0, 1):  # 2 of 5 down: still a quorum
        run.nodes[i].kill()
        run.count("node_killed")
    time.sleep(1.0)
    pause_holder(run, run.ttl * 2.5)
    run.nodes[2].kill()  # 3 of 5 down: no quorum, nobody may hold
    run.count("node_killed")
    time.sleep(1.0)
    # the documented restart rule: an empty node rejoins only after the longest TTL has passed
    time.sleep(run.ttl * 1.2)
    for i in (0, 1, 2):
        run.nodes[i].start()
        run.count("node_restarted")
    # 2 of 5 kept their data: the 3 restarted ones rejoin by themselves after restart_delay
    # (re-seeded from the 2 intact nodes and their clocks; before issue 36 an operator vouched)
    time.sleep(run.restart_delay + 0.5)
    pause_holder(run, run.ttl * 2.5)


def _sidecar_faults(run: Run, quick: bool) -> None:
    for _ in range(1 if quick else 3):
        time.sleep(random.uniform(0.5, 1.0))
        pause_holder(run, run.ttl * 1.5)  # past the renew deadline and the TTL
        time.sleep(random.uniform(0.5, 1.0))
        kill_holder(run, signal.SIGTERM)
        time.sleep(random.uniform(0.5, 1.0))
        kill_holder(run, signal.SIGKILL)
    if not quick:
        time.sleep(0.5)
        restart_node(run, 0, 0.5)


def _frozen_volumes(run: Run, quick: bool) -> None:
    for _ in range(2 if quick else 5):
        time.sleep(random.uniform(0.3, 0.8))
        freeze_holder_volume(run)


SCENARIOS = [
    Scenario("holder-pauses", "holders SIGSTOPped for 2.5 TTL, then resumed", _pauses),
    Scenario(
        "holder-pauses-unfenced",
        "the same pauses against a resource that does not check tokens (why fencing matters)",
        _pauses,
        fenced=False,
        expect_safe=False,
    ),
    Scenario("holder-kills", "holders SIGKILLed and replaced", _kills),
    Scenario(
        "handoff-faults",
        "direct hand-off: waiters SIGKILLed and SIGSTOPped while waiting, holders SIGKILLed, "
        "acquirers giving up after 0-30 ms",
        _handoff_faults,
        clients=5,
        give_up=0.03,
    ),
    Scenario(
        "semaphore-2",
        "a counting semaphore of limit 2, 5 clients: holders SIGSTOPped for 2.5 TTL and "
        "SIGKILLed; only tokens among the 2 highest may write, no token issued twice",
        _semaphore_faults,
        clients=5,
        limit=2,
    ),
    Scenario(
        "semaphore-2-quorum",
        "the same on a 3-node RedLock set (limit 2 on 3 nodes: every node grants)",
        _semaphore_faults,
        nodes=3,
        clients=5,
        limit=2,
        quick=False,
    ),
    Scenario(
        "node-restarts",
        "the single Redis node killed and restarted (AOF, fsync always)",
        _node_restarts,
    ),
    Scenario(
        "node-restarts-no-aof",
        "the same restarts of a node WITHOUT persistence: the fence counter is lost, "
        "tokens stay above every earlier one (seeded from the server clock)",
        _node_restarts,
        persistent=False,
        quick=False,
    ),
    Scenario(
        "sidecars",
        "3 leader-election sidecars: leader SIGSTOPped past its deadline, SIGTERMed, SIGKILLed",
        _sidecar_faults,
        clients=3,
        ttl=1.0,
        sidecars=True,
    ),
    Scenario(
        "sidecars-read-only-volume",
        "3 sidecars, each state directory a tmpfs: the leader's remounted read-only, then "
        "SIGTERMed: nobody may lead while its state file still says it does",
        _frozen_volumes,
        clients=3,
        ttl=1.0,
        sidecars=True,
        tmpfs=True,
    ),
    Scenario(
        "slow-node",
        "3-node quorum, one node behind a proxy that delays by TTL/3, then cuts it off",
        _slow_node,
        nodes=3,
        quick=False,
    ),
    Scenario(
        "quorum-5",
        "5-node quorum (AOF): 2 nodes down (quorum holds), then 3 down, then restarted",
        _quorum_losses,
        nodes=5,
        quick=False,
        restart_delay=1.0,
    ),
    Scenario(
        "majority-restarts",
        "5-node quorum: 3 nodes restarted from AOF, then all 5 from AOF, then 3 restarted "
        "empty; the set leads again by itself within restart_delay + 5 s each time",
        _majority_restarts,
        nodes=5,
        quick=False,
        restart_delay=1.0,
    ),
]


def quorum_available() -> bool:
    try:
        import redlease.quorum  # noqa: F401
    except ImportError:
        return False
    return True


WORKDIR_PREFIX = "chaos-"


def remove_orphaned_workdirs() -> None:
    """Remove ``chaos-<pid>-*`` work directories of chaos runs that no longer exist (SIGKILLed)."""
    for d in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*-*"):
        pid = d.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or Path(f"/proc/{pid}").exists():
            continue
        shutil.rmtree(d, ignore_errors=True)


def _stop_everything(run: Run, stop: threading.Event, observer: threading.Thread) -> None:
    """Stop the observer, every process (paused ones too), proxy and server of ``run``."""
    stop.set()
    if observer.is_alive():
        observer.join()
    for p in run.procs.values():
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
            p.wait()
    for proxy in run.proxies:
        proxy.stop()
    for n in [*run.nodes, run.resource]:
        n.stop()
    for volume in run.volumes.values():
        subprocess.run(["umount", "-l", str(volume)], capture_output=True, check=False)


def run_scenario(
    sc: Scenario, quick: bool, seconds: float, evidence: Path | None = None
) -> dict[str, Any]:
    """Run one scenario and check its histories. If it turns out not as expected and
    ``evidence`` is given, the histories are kept there (the work directory is always removed).
    """
    if sc.nodes > 1 and not quorum_available():
        return {"name": sc.name, "skipped": "redlease.quorum is not available"}
    if sc.tmpfs and not can_mount():
        return {"name": sc.name, "skipped": "cannot mount a tmpfs (needs root)"}
    resource = RedisServer()  # finds the binary first: no work directory if there is none
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-{sc.name}-"))
    nodes: list[RedisServer] = []
    run = Run(
        sc.name, nodes, resource, workdir, sc.ttl, seconds, fenced=sc.fenced,
        give_up=sc.give_up, tmpfs=sc.tmpfs, limit=sc.limit, restart_delay=sc.restart_delay,
    )  # fmt: skip
    started = now()
    stop = threading.Event()
    observer = threading.Thread(target=run.observe, args=(stop,), daemon=True)
    try:
        for _ in range(sc.nodes):
            nodes.append(RedisServer(persistent=sc.persistent).start())
        run.resource.start()
        if sc.name == "slow-node":
            run.proxies.append(DelayProxy(nodes[0].port).start())
            run.urls = [f"redis://127.0.0.1:{run.proxies[0].port}"] + [
                f"redis://127.0.0.1:{n.port}" for n in nodes[1:]
            ]
        else:
            run.urls = [f"redis://127.0.0.1:{n.port}" for n in nodes]
        sidecars = sc.sidecars
        for _ in range(sc.clients):
            if sidecars:
                run.spawn_sidecar()
            else:
                run.spawn_client()
        if sidecars:
            observer.start()
        # faults start once somebody holds the lock: on a busy machine starting the processes
        # alone can take seconds, and a fault that finds no holder is skipped
        if run.wait_for_holder(timeout=60) is None:
            raise RuntimeError(f"{sc.name}: nobody acquired the lock within 60 s")
        sc.inject(run, quick)
        if sidecars:
            time.sleep(1.0)  # keep sampling the last leader for a while
            stop.set()
            observer.join()
            for p in run.procs.values():
                p.send_signal(signal.SIGTERM)
        for p in run.procs.values():
            try:
                p.wait(timeout=max(1.0, seconds - (now() - started)) + 10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        events = []
        for f in sorted(workdir.glob("*.jsonl")):
            events += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        attempts = Resource(redis.Redis(port=run.resource.port)).attempts()
        verdict: Verdict = check(events, attempts, run.samples, run.claims)
    finally:
        _stop_everything(run, stop, observer)
        shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "name": sc.name,
        "description": sc.description,
        "fenced": sc.fenced,
        "nodes": sc.nodes,
        "limit": sc.limit,
        "seconds": round(now() - started, 1),
        "faults": run.faults,
        **verdict.as_dict(),
    }
    if run.led_again or run.stuck:
        result["led_again_s"] = run.led_again
        result["stuck"] = run.stuck
    if sc.sidecars:
        result["clients"] = run.next_id
        result["leaderships"] = len({s[4] for s in run.samples if s[3] and s[4]})
    result["safe"] = verdict.safe
    result["expected_safe"] = sc.expect_safe
    if evidence is not None and sc.expect_safe and not verdict.safe:
        with evidence.open("w") as out:
            for e in events:
                out.write(json.dumps(e) + "\n")
            for sample in run.samples:
                out.write(json.dumps({"event": "status_sample", "sample": sample}) + "\n")
        result["evidence"] = str(evidence)
    return result
