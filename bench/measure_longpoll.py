"""Measure how soon a hand-off reaches a waiting ``GET /status?wait=&since=``.

Run: .venv/bin/python -m bench.measure_longpoll [REPS] [disk]
Two real sidecars on a local redis-server; each round a long-poll waits at the standby, the
leader is sent SIGTERM, and the answer's arrival (wall clock, in this process) is compared with
the moment the standby published the new version (its ``status changed`` log line, written when
the waiters are woken). A new standby replaces the old leader. Prints p50 / p99 / max in ms.

The state directory is on tmpfs (/dev/shm), as in injected pods and the examples (an emptyDir
with ``medium: Memory``); ``disk`` puts it in the temporary directory instead: the state file's
fsyncs run on the sidecar's event loop before a woken long-poll can answer, so on a busy disk
they dominate the figure.
"""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench import stats
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, wait_until

TTL, DEADLINE, RETRY = 3.0, 2.0, 0.1
TMPFS = Path("/dev/shm")
WAITING = "redlease_status_waiting"


def start(identity: str, server: RedisServer, disk: bool) -> Sidecar:
    state = None if disk or not TMPFS.is_dir() else Path(tempfile.mkdtemp(dir=TMPFS))
    return Sidecar(identity, "bench-longpoll", [server.url], ttl=TTL, renew_deadline=DEADLINE,
                   retry_period=RETRY, state_dir=state).start().wait_up()  # fmt: skip


def long_poll(port: int, since: str, out: list[tuple[dict[str, Any], float]]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while True:
        conn.request("GET", f"/status?wait=30&since={since}")
        doc = json.loads(conn.getresponse().read())
        out.append((doc, time.time()))
        if doc["leader"]:
            conn.close()
            return
        since = doc["version"]


def published(sc: Sidecar, version: str) -> float:
    for line in sc.log().splitlines():
        if '"status changed"' in line and f'"{version}"' in line:
            return datetime.fromisoformat(json.loads(line)["timestamp"]).timestamp()
    raise AssertionError(f"version {version} not logged")


def measure(reps: int, disk: bool = False) -> list[float]:
    """Milliseconds from the standby's publication of the new view to the long-poll's answer,
    one a hand-off."""
    server = RedisServer().start()
    scs: list[Sidecar] = []
    lags: list[float] = []
    try:
        leader = start("pod-0", server, disk)
        scs.append(leader)
        wait_until(leader.is_leader)
        for i in range(reps):
            standby = start(f"pod-{i + 1}", server, disk)
            scs.append(standby)
            wait_until(lambda s=standby: (s.status() or {}).get("candidates") == 2)  # type: ignore[misc]
            since = standby.status()["version"]  # type: ignore[index]
            answers: list[tuple[dict[str, Any], float]] = []
            t = threading.Thread(target=long_poll, args=(standby.port, since, answers))
            t.start()
            wait_until(lambda s=standby: s.metric(WAITING) == 1)  # type: ignore[misc]
            leader.signal(signal.SIGTERM)
            t.join(30)
            doc, at = answers[-1]
            lags.append((at - published(standby, doc["version"])) * 1000)
            leader.wait()
            leader.stop()
            leader = standby
    finally:
        for sc in scs:
            sc.stop()
            if not disk:
                shutil.rmtree(sc.state_dir, ignore_errors=True)
        server.stop()
    return lags


def scenario(
    *, reps: int, disk: bool = False, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """The figures for results.json: samples, p50, p99 and max (ms)."""
    where = "disk" if disk else "tmpfs"
    log(f"long-poll: {reps} hand-offs, state directory on {where} ...")
    ms = measure(reps, disk)
    result = {
        "reps": reps,
        "state_dir": where,
        "samples_ms": [round(x, 2) for x in ms],
        "p50_ms": stats.percentile(ms, 50),
        "p99_ms": stats.percentile(ms, 99),
        "max_ms": max(ms),
    }
    log(f"  published -> long-poll answer: p50 {result['p50_ms']:.1f} ms, "
        f"p99 {result['p99_ms']:.1f} ms, max {result['max_ms']:.1f} ms")  # fmt: skip
    return result


if __name__ == "__main__":
    scenario(reps=int(sys.argv[1]) if len(sys.argv) > 1 else 20, disk="disk" in sys.argv[2:])
