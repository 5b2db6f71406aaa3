"""Curve 1: the operator's refresh cycle against the number of DistributedLocks.

Per point N, in the harness process: the Kubernetes API emulator the tests use (KMock with
redlease.devtools.kubeemulator's ``Emulator``) holding N DistributedLocks on one local
redis-server, one in ten of them held (a ``redlease.Lock`` with a long TTL, so steady state
writes no status). Then a fresh ``redlease operator`` process (the CLI, as users run it, with
``--refresh 1``) against them:

* first pass: from the operator's start to a status on some lock, and on every lock (given up
  after ``first_pass_limit``: the statuses written by then are recorded);
* steady state: a window of at least two full refreshes of every lock (at most
  :data:`WINDOW_LIMIT`). One refresh of a lock is
  one ``EVALSHA`` of the status script on Redis (``INFO commandstats``), so seconds per full
  refresh = window / (status reads / N): what the operator achieves however its cycles split.
  Per lock and refresh: the operator's CPU (``/proc/PID/stat``) and Redis execution time; per
  cycle: Redis round trips (the operator's ``/metrics`` counters) and API requests (the
  emulator's request log, by verb); the operator's RSS at the end and its peak (VmHWM).

The refresh interval is 1 s so a cycle is bounded by the work, not the cadence, once the work
takes longer; below that, seconds per refresh shows the 1 s floor and CPU per lock is the cost.

With ``REDLEASE_SCALE_PROFILE=DIR`` the operator runs under bench/scale/profiled.py and each
steady-state window is profiled (``DIR/op-N.prof`` for pstats, ``DIR/op-N.json``: the garbage
collector's passes and CPU seconds by generation, asyncio tasks, objects).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from bench.scale import curves

ROOT = Path(__file__).resolve().parents[2]
COUNTS = (100, 500, 1000, 5000)
QUICK_COUNTS = (100, 500)
REFRESH = 1.0
HELD_EVERY = 10
WINDOW_LIMIT = 45.0  # a steady-state window ends here even short of two refreshes
_TICK = os.sysconf("SC_CLK_TCK")
# A directory: the operator runs under bench/scale/profiled.py, profiled through each
# steady-state window (op-N.prof, op-N.json there). The numbers measured then include the
# profiler's own cost: for attribution, not for the curve.
PROFILE_ENV = "REDLEASE_SCALE_PROFILE"


def _harness() -> Any:
    """The emulator and helpers the operator tests use (redlease.devtools.kubeemulator)."""
    from redlease.devtools import kubeemulator

    return kubeemulator


def _proc(pid: int) -> dict[str, float]:
    """CPU seconds (user + system), RSS and peak RSS (MB) of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    out = {"cpu_s": (int(fields[11]) + int(fields[12])) / _TICK}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5].lower()] = int(line.split()[1]) / 1024
    return {"cpu_s": out["cpu_s"], "rss_mb": out["vmrss"], "peak_rss_mb": out["vmhwm"]}


async def _metrics(port: int) -> dict[str, float]:
    """The operator's own counters from its /metrics (cycles, round trips); empty when it does
    not answer within 15 s (an operator whose loop is saturated)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError):
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("redlease_operator_"):
            name, _, value = line.partition(" ")
            out[name[len("redlease_operator_") :]] = float(value)
    return out


class _NewestFirst(list[Any]):
    """The emulator's request log, iterated newest first (see :func:`_emulator`)."""

    def __iter__(self) -> Iterator[Any]:
        return reversed(self)


def _emulator(h: Any) -> Any:
    """kubeemulator's ``Emulator`` with a request log fit for thousands of objects, counting
    requests by verb. KMock finds which reaction serves a request by scanning its request log
    from the oldest entry, for every reaction: quadratic in the requests kept, minutes for a
    few thousand objects, and nothing the operator does. Here the log holds only the requests
    not yet answered, newest first, so the request being matched is found at once. The
    objects, the watch streams and the answers are the emulator's own."""

    class Counting(h.Emulator):  # type: ignore[misc]
        def __attrs_post_init__(self) -> None:
            super().__attrs_post_init__()
            object.__setattr__(self, "_requests", _NewestFirst())
            self.counts: Counter[str] = Counter()

        async def _handle(self, request: Any) -> Any:
            action = getattr(request, "action", None)
            self.counts[str(getattr(action, "name", None) or request.method).lower()] += 1
            try:
                return await super()._handle(request)
            finally:
                for i in range(len(self._requests) - 1, -1, -1):
                    if self._requests[i] is request:
                        del self._requests[i]
                        break

    return Counting()


async def _create(cluster: Any, n: int, url: str) -> None:
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            await cluster.create(f"l{i}", {"keys": [f"k{i}"], "nodes": [{"url": url}]})

    await asyncio.gather(*(one(i) for i in range(n)))


async def _point(
    n: int, log: Callable[[str], None], min_window: float, first_pass_limit: float
) -> dict[str, Any]:
    import kmock

    import redlease
    from redlease.devtools.localredis import RedisServer, free_port

    h = _harness()
    load = [os.getloadavg()[0]]
    out: dict[str, Any] = {"locks": n}
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        rc = server.client()
        for i in range(0, n, HELD_EVERY):
            redlease.Lock(rc, f"k{i}", ttl=3600, identity=f"pod-{i}").acquire()
        async with _emulator(h) as api, kmock.Server(api) as srv:
            h.declare(api)
            url = str(srv.url).rstrip("/")
            cluster = h.Cluster(api, None, url)
            t0 = time.perf_counter()
            await _create(cluster, n, server.url)
            out["create_s"] = time.perf_counter() - t0
            port = free_port()
            env = {**os.environ, "KUBECONFIG": str(h.kubeconfig(Path(tmp) / "kc", url))}
            env.pop("KUBERNETES_SERVICE_HOST", None)
            profile = os.environ.get(PROFILE_ENV)
            command = ["-m", "redlease"]
            if profile:  # see bench/scale/profiled.py (scenario made the directory)
                command = ["-m", "bench.scale.profiled", str(Path(profile) / f"op-{n}"), "--"]
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *command,
                "operator",
                "--namespace",
                h.NAMESPACE,
                "--refresh",
                f"{REFRESH:g}",
                "--metrics",
                f"127.0.0.1:{port}",
                env=env,
                cwd=ROOT,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            try:
                started = time.perf_counter()
                names = [f"l{i}" for i in range(n)]
                while (done := sum(1 for x in names if cluster.status(x).get("phase"))) < n:
                    if done and "first_status_s" not in out:
                        out["first_status_s"] = time.perf_counter() - started
                    if proc.returncode is not None:
                        raise RuntimeError(f"operator exited with {proc.returncode}")
                    if time.perf_counter() - started > first_pass_limit:
                        break  # measured as it is: the steady state never came
                    await asyncio.sleep(1.0)  # a scan costs the emulator's loop too
                out["statuses_written"] = done
                out["first_pass_s"] = time.perf_counter() - started if done == n else math.nan
                out.setdefault("first_status_s", out["first_pass_s"] if done else math.nan)
                await asyncio.sleep(2 * REFRESH)  # the first writes settle
                if profile:
                    proc.send_signal(signal.SIGUSR1)
                out.update(await _window(n, proc.pid, port, api, rc, min_window, load))
                if profile:
                    proc.send_signal(signal.SIGUSR2)
                    await asyncio.sleep(2.0)  # the profile is written
            finally:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        rc.close()
    load.append(os.getloadavg()[0])
    out["load_1min"] = load
    log(
        f"operator n={n}: {out['seconds_per_refresh']:.2f} s per refresh of every lock, "
        f"{out['cpu_ms_per_lock']:.3f} ms CPU per lock, {out['round_trips_per_cycle']:.1f} "
        f"Redis round trips and {out['api_requests_per_cycle']:.1f} API requests per cycle, "
        f"RSS {out['rss_mb']:.0f} MB (peak {out['peak_rss_mb']:.0f}); first pass "
        f"{out['first_pass_s']:.1f} s ({out['statuses_written']} of {n} statuses)"
    )
    return out


async def _window(
    n: int, pid: int, port: int, api: Any, rc: Any, min_window: float, load: list[float]
) -> dict[str, Any]:
    m0 = await _metrics(port)
    p0, s0, q0 = _proc(pid), curves.commandstats(rc.info("commandstats")), Counter(api.counts)
    t0 = time.perf_counter()
    reads = 0
    while True:
        await asyncio.sleep(0.5)
        elapsed = time.perf_counter() - t0
        delta = curves.stat_delta(s0, curves.commandstats(rc.info("commandstats")))
        reads = delta.get("evalsha", (0, 0.0))[0]
        if (elapsed >= min_window and reads >= 2 * n) or elapsed > max(min_window, WINDOW_LIMIT):
            break
    p1, q1 = _proc(pid), Counter(api.counts)
    m1 = await _metrics(port)
    load.append(os.getloadavg()[0])
    refreshes = reads / n
    nan = math.nan
    cycles = m1.get("refresh_cycles_total", nan) - m0.get("refresh_cycles_total", nan)
    api_delta = {k: v - q0.get(k, 0) for k, v in q1.items() if v - q0.get(k, 0)}
    calls, usec = curves.totals(delta)
    cpu = p1["cpu_s"] - p0["cpu_s"]
    return {
        "window_s": elapsed,
        "status_reads": reads,
        "cycles": cycles,
        "seconds_per_refresh": curves.per(elapsed, refreshes),
        "locks_per_cycle": curves.per(reads, cycles),
        "cpu_s_per_refresh": curves.per(cpu, refreshes),
        "cpu_ms_per_lock": curves.per(cpu * 1000, reads),
        "redis_us_per_lock": curves.per(usec, reads),
        "redis_calls_per_cycle": curves.per(calls, cycles),
        "round_trips_per_cycle": curves.per(
            m1.get("redis_round_trips_total", nan) - m0.get("redis_round_trips_total", nan),
            cycles,
        ),
        "api_requests_per_cycle": curves.per(sum(api_delta.values()), cycles),
        "api_requests": api_delta,
        "redis_commands": {k: {"calls": c, "usec": u} for k, (c, u) in delta.items()},
        "rss_mb": p1["rss_mb"],
        "peak_rss_mb": p1["peak_rss_mb"],
    }


def scenario(
    counts: tuple[int, ...] = COUNTS,
    log: Callable[[str], None] = print,
    min_window: float = 8.0,
    first_pass_limit: float = 180.0,
) -> dict[str, Any]:
    """Every point in turn; the first pass waits at most ``first_pass_limit`` seconds for a
    status on every lock, then the steady-state window measures whatever the operator does."""
    profile = os.environ.get(PROFILE_ENV)
    if profile:
        Path(profile).mkdir(parents=True, exist_ok=True)
    points = []
    for n in counts:
        try:
            points.append(asyncio.run(_point(n, log, min_window, first_pass_limit)))
        except Exception as exc:  # noqa: BLE001 - reported in the results
            log(f"operator n={n}: {type(exc).__name__}: {exc}")
            points.append({"locks": n, "error": f"{type(exc).__name__}: {exc}"})
    return {"refresh_s": REFRESH, "held_every": HELD_EVERY, "points": points}


if __name__ == "__main__":
    import json

    counts = tuple(int(a) for a in sys.argv[1:]) or QUICK_COUNTS
    print(json.dumps(scenario(counts), indent=1))
