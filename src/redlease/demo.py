"""`redlease demo`: a local redis-server and a few contenders taking turns on one lock.

Each contender acquires the lock, prints the fencing token it got, holds it briefly, releases
it and queues again. The tokens printed only ever go up.
"""

from __future__ import annotations

import itertools
import threading
import time

import redis

from redlease.localredis import RedisServer
from redlease.locks import Lock


def run_demo(contenders: int = 3, rounds: int = 3, hold: float = 0.05) -> int:
    """Run the demo; returns the process exit code."""
    with RedisServer() as server:
        print(f"redis-server {server.binary} on {server.address}")
        client = redis.Redis(host="127.0.0.1", port=server.port)
        printed: list[int] = []
        out = threading.Lock()

        def contender(name: str) -> None:
            lock = Lock(client, "demo", ttl=5.0, identity=name)
            for _ in range(rounds):
                with lock as lease:
                    with out:
                        printed.append(lease.fencing_token)
                        print(f"  {name:<12} holds 'demo' with fencing token {lease.fencing_token}")
                    time.sleep(hold)

        threads = [
            threading.Thread(target=contender, args=(f"contender-{i + 1}",))
            for i in range(contenders)
        ]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        client.close()
    increasing = all(a < b for a, b in itertools.pairwise(printed))
    print(
        f"{len(printed)} critical sections in {elapsed:.2f}s; fencing tokens strictly "
        f"increasing: {'yes' if increasing else 'NO'}"
    )
    return 0 if increasing else 1
