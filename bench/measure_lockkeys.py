"""Measure the Redis keys the lock API's names leave behind (issue 34, finding 7).

Run: .venv/bin/python -m bench.measure_lockkeys [NAMES]
A real sidecar (``--api-locks jobs/``) on a local redis-server; one client acquires and
releases NAMES distinct names (default 10,000) over HTTP. Prints the time taken, the keys and
the bytes (``used_memory`` delta) per name right after, then polls DBSIZE until the names' keys
are gone or ttl + FORGET_AFTER + 30 s have passed, and prints the keys left and when.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from typing import Any

import redis

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar
from redlease.sidecar.lockapi import FORGET_AFTER

PREFIX = "jobs/"
TTL_MS = 2_000


def names_keys(client: redis.Redis) -> int:
    """The keys of the API's names (the sidecar's own election lock excluded)."""
    return sum(1 for _ in client.scan_iter(match=f"redlease:{{{PREFIX}*", count=1000))


def post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> dict[str, Any]:
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    doc: dict[str, Any] = json.loads(answer.read())
    assert answer.status == 200, doc
    return doc


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    server = RedisServer().start()
    sc = Sidecar("pod-a", "bench-leader", [server.url], extra=["--api-locks", PREFIX]).start()
    client = server.client()
    try:
        sc.wait_up()
        base = int(client.info("memory")["used_memory"])
        conn = http.client.HTTPConnection("127.0.0.1", sc.port, timeout=30)
        t0 = time.monotonic()
        for i in range(n):
            doc = post(conn, f"/locks/{PREFIX}n{i}/acquire", {"ttl_ms": TTL_MS})
            post(conn, f"/locks/{PREFIX}n{i}/release", {"lease": doc["lease"]})
        took = time.monotonic() - t0
        conn.close()
        keys = names_keys(client)
        used = int(client.info("memory")["used_memory"]) - base
        print(f"{n} names acquired and released in {took:.1f} s")
        print(f"right after: {keys} keys ({keys / n:.2f} a name), {used / n:.0f} B a name")
        bound = TTL_MS / 1000 + FORGET_AFTER
        end = t0 + took + bound + 30
        while (keys := names_keys(client)) and time.monotonic() < end:
            time.sleep(0.5)
        after = time.monotonic() - (t0 + took)
        used = int(client.info("memory")["used_memory"]) - base
        print(
            f"{after:.1f} s after the last release (bound: ttl + FORGET_AFTER = {bound:g} s): "
            f"{keys} keys left, {used / n:.0f} B a name"
        )
    finally:
        client.close()
        sc.stop()
        server.stop()


if __name__ == "__main__":
    main()
