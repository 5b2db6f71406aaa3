"""A separate OS process that contends for a lock (used by tests/core/test_processes.py).

Modes:
  counter PORT NAME N      N critical sections of GET/SET counter+1; prints each fencing token
  hold PORT NAME TTL       acquire with renewal, print "acquired TOKEN", then obey stdin lines:
                           "status" -> prints "valid" / "lost"; "release" -> prints the outcome
"""

from __future__ import annotations

import sys

import redis

import redlease


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


def hold(port: int, name: str, ttl: float) -> None:
    client = redis.Redis(port=port)
    lock = redlease.Lock(client, name, ttl=ttl, identity=f"worker-{name}")
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


if __name__ == "__main__":
    mode, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if mode == "counter":
        counter(port, name, int(sys.argv[4]))
    else:
        hold(port, name, float(sys.argv[4]))
