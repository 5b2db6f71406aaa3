"""Latency of the injection webhook per AdmissionReview (HTTPS, kopf, a DistributedLock GET).

Run: .venv/bin/python bench/measure_webhook.py [N]
Sends N (200) requests for a pod that gets the sidecar, one at a time over one keep-alive
connection (as the API server reuses connections), then N with a new TLS connection each, then
N with 8 in flight; prints p50/p90/p99/max in milliseconds. Twice: with the DistributedLock GET
going to KMock (which stands in for the API server, in the same process and loop as the client,
and is itself slow: ~20 ms a GET), and with the lock answered from memory, which is the
webhook's own cost (TLS, kopf, the plan, kopf's JSON diff).
"""

from __future__ import annotations

import asyncio
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from redlease.devtools.pods import LOCK_SPEC, deployment_pod
from redlease.devtools.webhookharness import Webhook, review, running_webhook
from redlease.operator.injection import LockLookup
from redlease.operator.webhook import LockSource

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def summary(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    q = statistics.quantiles(ms, n=100)
    return (
        f"{name:<28} n={len(ms):4d}  p50 {q[49]:6.2f}  p90 {q[89]:6.2f}  p99 {q[98]:6.2f}  "
        f"max {ms[-1]:6.2f} ms"
    )


async def timed(hook: Webhook, session: aiohttp.ClientSession) -> float:
    start = time.perf_counter()
    async with session.post(hook.url, json=review(deployment_pod())) as resp:
        doc = await resp.json()
    elapsed = time.perf_counter() - start
    assert doc["response"]["allowed"] and doc["response"]["patch"]  # noqa: PT018
    return elapsed


class InMemoryLocks(LockSource):
    async def get(self, namespace: str, name: str) -> LockLookup:
        return LockLookup(obj={"spec": LOCK_SPEC})


async def measure(locks: type[LockSource], label: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with running_webhook(Path(tmp), locks=locks) as hook:
            hook.add_lock("orders", LOCK_SPEC)
            hook.add_secret("redis-auth", {"password": "pw"})
            for _ in range(20):  # warm up
                await timed(hook, hook.session)
            keepalive = [await timed(hook, hook.session) for _ in range(N)]
            context: ssl.SSLContext = hook.session.connector._ssl  # type: ignore[union-attr]
            fresh = []
            for _ in range(N):
                connector = aiohttp.TCPConnector(ssl=context, force_close=True)
                async with aiohttp.ClientSession(connector=connector) as session:
                    fresh.append(await timed(hook, session))
            sem = asyncio.Semaphore(8)

            async def one() -> float:
                async with sem:
                    return await timed(hook, hook.session)

            parallel = await asyncio.gather(*(one() for _ in range(N)))
    print(f"-- {label}")
    print(summary("keep-alive, sequential", keepalive))
    print(summary("new TLS connection each", fresh))
    print(summary("keep-alive, 8 in flight", list(parallel)))


async def main() -> None:
    await measure(LockSource, "lock GET from KMock")
    await measure(InMemoryLocks, "lock from memory (the webhook's own cost)")


if __name__ == "__main__":
    asyncio.run(main())
