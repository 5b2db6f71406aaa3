"""Sidecar failover (SIGTERM, SIGKILL) against the plain TTL-expiry baseline; idle RSS and CPU.

Sidecars are real ``python -m redlease sidecar`` processes started with the documented
flags; the benchmark polls the standby's ``GET /status`` (keep-alive, every millisecond) and
takes the first ``leader: true`` as the take-over time. The baseline elector
(:mod:`bench.plain_elector`) prints its take-over time itself.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import stats
from bench.runinfo import proc_usage
from redlease.devtools.localredis import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[1]
LOCK = "bench-failover"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    return env


class Sidecar:
    """One ``redlease sidecar`` process and a keep-alive HTTP connection to it."""

    def __init__(
        self,
        url: str,
        identity: str,
        ttl: float | None,
        lock: str = LOCK,
        source: Sequence[str] | None = None,
    ) -> None:
        """``source``: the flags naming the lock and its nodes instead of ``--lock LOCK --redis
        URL`` (e.g. ``--lock-ref NS/NAME --kube-api URL``; give ``ttl`` None with it)."""
        self.identity = identity
        self.port = free_port()
        self.state_dir = Path(tempfile.mkdtemp(prefix="redlease-bench-sidecar-"))
        cmd = [sys.executable, "-m", "redlease", "sidecar"]
        cmd += ["--lock", lock, "--redis", url] if source is None else list(source)
        if ttl is not None:
            cmd += ["--ttl", f"{ttl:g}"]
        cmd += ["--identity", identity, "--http", f"127.0.0.1:{self.port}"]
        cmd += ["--state-dir", str(self.state_dir)]
        self.log = open(self.state_dir / "sidecar.log", "w+b")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=_env())
        self._conn: http.client.HTTPConnection | None = None

    def status(self) -> dict[str, Any] | None:
        """``GET /status`` as a dict, or None if the sidecar does not answer (yet)."""
        try:
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            self._conn.request("GET", "/status")
            resp = self._conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                return None
            out: dict[str, Any] = json.loads(body)
            return out
        except (OSError, http.client.HTTPException, ValueError):
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return None

    def wait(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> float:
        """Poll /status every ms until ``predicate``; the monotonic time it first held."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.status()
            now = time.monotonic()
            if st is not None and predicate(st):
                return now
            if self.proc.poll() is not None:
                raise RuntimeError(f"sidecar {self.identity} exited: {self.tail()}")
            if now > deadline:
                raise TimeoutError(f"sidecar {self.identity}: condition not met in {timeout}s")
            time.sleep(0.001)

    def tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-400:].strip()

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self._conn is not None:
            self._conn.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.state_dir, ignore_errors=True)


def _reason(exc: BaseException) -> str:
    """One line saying why a sidecar run failed (the last line of its log or message)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else type(exc).__name__


def _take_over(kind: str, url: str, ttl: float, reps: int, rnd: random.Random) -> list[float]:
    """``reps`` failovers: kill the leader with ``kind``, time the standby's take-over (ms)."""
    sig = signal.SIGTERM if kind == "sigterm" else signal.SIGKILL
    lock = f"{LOCK}-{kind}"
    n = 0
    leader = Sidecar(url, f"bench-{kind}-{n}", ttl, lock)
    out = []
    try:
        leader.wait(lambda st: st.get("leader") is True, 30)
        for _ in range(reps):
            n += 1
            standby = Sidecar(url, f"bench-{kind}-{n}", ttl, lock)
            try:
                standby.wait(lambda st: st.get("leader") is False, 30)
                time.sleep(rnd.uniform(0.05, ttl / 3))  # a random phase of the renew cycle
                killed = time.monotonic()
                leader.proc.send_signal(sig)
                took = standby.wait(lambda st: st.get("leader") is True, ttl * 3 + 10)
            except BaseException:
                standby.stop()
                raise
            out.append((took - killed) * 1000)
            leader.stop()
            leader = standby
    finally:
        leader.stop()
    return out


class _Plain:
    def __init__(self, port: int, lock: str, ttl: float, retry: float, identity: str) -> None:
        cmd = [sys.executable, "-m", "bench.plain_elector", "--port", str(port), "--lock", lock]
        cmd += ["--ttl", f"{ttl:g}", "--retry", f"{retry:g}", "--identity", identity]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)

    def line(self) -> str:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            raise RuntimeError("plain elector exited")
        return text.strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _baseline(port: int, ttl: float, retry: float, reps: int, rnd: random.Random) -> list[float]:
    """The plain elector: SIGTERM the leader (it does not release), time the take-over (ms)."""
    lock = f"{LOCK}-plain"
    n = 0
    leader = _Plain(port, lock, ttl, retry, f"plain-{n}")
    out = []
    try:
        assert leader.line() == "READY"
        assert leader.line().startswith("LEADER")
        for _ in range(reps):
            n += 1
            standby = _Plain(port, lock, ttl, retry, f"plain-{n}")
            try:
                assert standby.line() == "READY"
                time.sleep(rnd.uniform(0.05, retry))  # a random phase of the retry cycle
                killed = time.monotonic()
                leader.proc.send_signal(signal.SIGTERM)
                took = float(standby.line().split()[1])
            except BaseException:
                standby.stop()
                raise
            out.append((took - killed) * 1000)
            leader.stop()
            leader = standby
    finally:
        leader.stop()
    return out


def _idle(url: str, port: int, seconds: float) -> dict[str, Any]:
    """Idle leader sidecar (default TTL): RSS and CPU over ``seconds``; plus an RSS anchor."""
    car = Sidecar(url, "bench-idle", None, lock=f"{LOCK}-idle")
    try:
        car.wait(lambda st: st.get("leader") is True, 30)
        if car._conn is not None:
            car._conn.close()
        time.sleep(1.0)  # settle after start-up
        _, cpu0 = proc_usage(car.proc.pid)
        t0 = time.monotonic()
        time.sleep(seconds)
        rss, cpu1 = proc_usage(car.proc.pid)
        wall = time.monotonic() - t0
    finally:
        car.stop(signal.SIGTERM)
    anchor_cmd = [
        sys.executable,
        "-c",
        # the sidecar's own dependencies imported, one connection made: what redlease adds
        # is the difference (issue 39: at most 8 MB)
        "import aiohttp.web, prometheus_client, structlog, redis, redis.asyncio, sys, time; "
        "c=redis.Redis(port=int(sys.argv[1])); c.ping(); "
        "print('ok', flush=True); time.sleep(60)",
        str(port),
    ]
    anchor = subprocess.Popen(anchor_cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert anchor.stdout is not None
        assert anchor.stdout.readline().strip() == "ok"
        anchor_rss, _ = proc_usage(anchor.pid)
    finally:
        anchor.kill()
        anchor.wait()
    return {
        "seconds": round(wall, 2),
        "rss_mb": round(rss, 1),
        "cpu_percent": round(100 * (cpu1 - cpu0) / wall, 3),
        "anchor_rss_mb": round(anchor_rss, 1),
        "anchor": "python + the sidecar's dependencies (aiohttp, redis-py, structlog, "
        "prometheus-client) + one connection, idle",
    }


def scenario(
    *, reps: int, ttl: float, idle_seconds: float, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Failover times (ms) for SIGTERM, SIGKILL and the baseline, and the idle footprint."""
    rnd = random.Random(6)
    retry = ttl * 2 / 15  # client-go's ratio: lease 15 s, retry 2 s
    result: dict[str, Any] = {"ttl_s": ttl, "reps": reps, "baseline_retry_s": round(retry, 3)}
    with RedisServer() as server:
        log(f"failover: plain TTL-expiry baseline (ttl {ttl:g}s, retry {retry:.2f}s) ...")
        base = _baseline(server.port, ttl, retry, reps, rnd)
        result["baseline"] = {"samples_ms": base, **_pcts(base)}
        # the idle measurement doubles as the probe: no working sidecar, no sidecar scenarios
        log(f"idle sidecar: RSS and CPU over {idle_seconds:g}s ...")
        try:
            import redlease.sidecar  # noqa: F401

            result["idle"] = _idle(server.url, server.port, idle_seconds)
        except ImportError:
            why = "redlease.sidecar is not installed"
        except (RuntimeError, TimeoutError) as exc:
            why = _reason(exc)
        else:
            why = ""
        if why:
            log(f"  skipped: sidecar unavailable ({why})")
            result["skipped"] = f"skipped: sidecar unavailable ({why})"
            return result
        for kind in ("sigterm", "sigkill"):
            log(f"failover: sidecar {kind.upper()} x{reps} ...")
            try:
                ms = _take_over(kind, server.url, ttl, reps, rnd)
            except (RuntimeError, TimeoutError) as exc:
                log(f"  {kind}: failed: {_reason(exc)}")
                result[f"{kind}_error"] = f"failed: {_reason(exc)}"
                continue
            result[kind] = {"samples_ms": ms, **_pcts(ms)}
    return result


def _pcts(ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": stats.percentile(ms, 50),
        "max_ms": max(ms) if ms else float("nan"),
        "min_ms": min(ms) if ms else float("nan"),
    }
