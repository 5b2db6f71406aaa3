"""What the soak's parts share: process figures from /proc, the sidecars of a lock, JSON over
HTTP and the DistributedLocks in KMock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.failover import Sidecar
from redlease.devtools.kubeemulator import NAMESPACE

TTL = 6.0  # the sidecars' lease: a SIGKILLed leader is replaced within about this
REFRESH = 1.0  # the operator's refresh interval
T0 = time.monotonic()


def say(text: str) -> None:
    """A progress line on stderr, with the seconds since the start."""
    print(f"[{time.monotonic() - T0:7.1f}s] {text}", file=sys.stderr, flush=True)


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


def summary(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "min": None, "p50": None, "max": None}
    return {
        "n": len(values),
        "min": round(min(values), 3),
        "p50": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def growth(first: dict[str, int] | None, last: dict[str, int] | None, key: str) -> float | None:
    if not first or not last or not first.get(key):
        return None
    return round(100.0 * (last[key] - first[key]) / first[key], 1)


@dataclass
class Pair:
    """The two sidecars of one lock: on ``url`` (``--lock``, ``--redis``), or on what
    ``source`` says (``--lock-ref``: the DistributedLock's nodes and timing)."""

    lock: str
    url: str = ""
    source: Sequence[str] | None = None
    sidecars: dict[str, Sidecar] = field(default_factory=dict)
    lives: list[dict[str, Any]] = field(default_factory=list)  # one per ended sidecar process

    def start(self, identity: str) -> Sidecar:
        ttl = TTL if self.source is None else None
        sc = Sidecar(self.url, identity, ttl, self.lock, source=self.source)
        sc.started = time.monotonic()  # type: ignore[attr-defined]
        sc.first = None  # type: ignore[attr-defined]
        self.sidecars[identity] = sc
        return sc


async def get_json(session: aiohttp.ClientSession, url: str, timeout: float = 2.0) -> Any:
    """The JSON answer to GET ``url``; None when there is none within ``timeout``."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            return await resp.json() if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def metrics(session: aiohttp.ClientSession, port: int) -> dict[str, float]:
    """A /metrics page on 127.0.0.1:``port`` as {series: value} (empty: not read in 10 s)."""
    out: dict[str, float] = {}
    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
        url = f"http://127.0.0.1:{port}/metrics"
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            text = await resp.text()
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                out[series] = float(value)
    return out


def locks_url(api: str, name: str = "", namespace: str = NAMESPACE) -> str:
    """The DistributedLocks of ``namespace`` in the API at ``api`` (or one of them)."""
    path = f"{api}/apis/redlease.dev/v1alpha1/namespaces/{namespace}/distributedlocks"
    return f"{path}/{name}" if name else path


async def create_lock(
    session: aiohttp.ClientSession,
    api: str,
    name: str,
    spec: dict[str, Any],
    namespace: str = NAMESPACE,
) -> None:
    body = {
        "apiVersion": "redlease.dev/v1alpha1",
        "kind": "DistributedLock",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    async with session.post(locks_url(api, namespace=namespace), json=body) as resp:
        assert resp.status == 201, await resp.text()
