"""A separate OS process that contends for a lock (tests/core/test_processes.py and
test_departed_waiters.py).

Modes:
  counter PORT NAME N      N critical sections of GET/SET counter+1; prints each fencing token
  hold PORT NAME TTL [GRACE]
                           acquire with renewal, print "acquired TOKEN", then obey stdin lines:
                           "status" -> prints "valid" / "lost"; "release" -> prints the outcome;
                           GRACE: seconds its waiter registration outlives each wait (default
                           the library's), so a test can keep it first in the queue
  quit PORT NAME N FLAVOR  N waiters (FLAVOR: asyncio tasks or threads, one client) give up after
                           0.3 s, their listener giving up for them (even for one); once all
                           raised LockTimeout, print "timed-out" and exit at once (os._exit):
                           whatever the process had yet to send never goes out
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
from typing import Any

import redis
import redis.asyncio as aioredis

import redlease
from redlease import aio
from redlease.core import waiting


def counter(port: int, name: str, n: int) -> None:
    client = redis.Redis(port=port)
    lock = redlease.Lock(client, name, ttl=10)
    tokens = []
    for _ in range(n):
        with lock as lease:
            value = int(client.get(f"{name}:counter") or 0)
            client.set(f"{name}:counter", value + 1)
            tokens.append(lease.fencing_token)
    print(" ".join(map(str, tokens)), flush=True)


def hold(port: int, name: str, ttl: float, grace: float | None = None) -> None:
    client = redis.Redis(port=port)
    lock = redlease.Lock(client, name, ttl=ttl, identity=f"worker-{name}")
    if grace is not None:
        _lingering(lock, grace)
    lease = lock.acquire()
    lost = []
    renewer = redlease.Renewer(lock, on_lost=lambda e: lost.append(e)).start()
    print(f"acquired {lease.fencing_token}", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "status":
            # answered from the local deadline alone, before any Redis round trip
            print("valid" if lease.valid else "lost", flush=True)
        elif cmd == "release":
            renewer.stop()
            try:
                lock.release()
                print("released", flush=True)
            except redlease.NotOwned:
                print("not-owned", flush=True)
            return


def _lingering(lock: Any, grace: float = 30.0) -> Any:
    """``lock`` with a registration that outlives the test (``grace`` s): only the give-up may
    take the waiter off the queue, not the registration's lapse."""
    options = dataclasses.replace(lock.prim.options, registration_grace=grace)
    lock.prim = dataclasses.replace(lock.prim, options=options)
    return lock


def quit_waiting(port: int, name: str, n: int, flavor: str) -> None:
    waiting.TOGETHER = 1  # the listener gives up for a lone waiter too
    left = [n]
    guard = threading.Lock()

    def timed_out() -> None:
        with guard:
            left[0] -= 1
            if left[0] == 0:
                print("timed-out", flush=True)
                os._exit(0)

    if flavor == "asyncio":

        async def one(client: aioredis.Redis, i: int) -> None:
            lock = _lingering(aio.Lock(client, name, ttl=30, identity=f"quitter-{i}"))
            try:
                await lock.acquire(timeout=0.3)
            except redlease.LockTimeout:
                timed_out()

        async def main() -> None:
            client = aioredis.Redis(port=port)
            await asyncio.gather(*(one(client, i) for i in range(n)))

        asyncio.run(main())
    else:
        client = redis.Redis(port=port)

        def thread(i: int) -> None:
            lock = _lingering(redlease.Lock(client, name, ttl=30, identity=f"quitter-{i}"))
            try:
                lock.acquire(timeout=0.3)
            except redlease.LockTimeout:
                timed_out()

        threads = [threading.Thread(target=thread, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print("not-timed-out", flush=True)


if __name__ == "__main__":
    mode, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "counter":
        counter(port, name, int(sys.argv[4]))
    elif mode == "quit":
        quit_waiting(port, name, int(sys.argv[4]), sys.argv[5])
    else:
        hold(port, name, float(sys.argv[4]), float(sys.argv[5]) if len(sys.argv) > 5 else None)
