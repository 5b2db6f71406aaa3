"""One chaos client process: acquire, "work", write with the fencing token, release; repeat.

Usage: python -m chaos.client CONFIG_JSON. Appends one JSON line per event to its history file.
Checks ``lease.valid`` before each write, like a careful application; a pause between the check
and the write is exactly what fencing exists for.

Times come from :func:`chaos.clock.now`. An ``acquired`` event carries ``called`` and
``returned``: the lock was granted somewhere in between, and the process may have been paused
for any length of time anywhere in that interval (or before it wrote the event down).
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from typing import Any

import redis

import redlease
from chaos.clock import now
from chaos.resource import Resource
from redlease.core.connect import connect, connect_target, validate_target


def main(cfg: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.ERROR)  # outages are expected here; the history has them
    who = cfg["id"]
    socket_timeout = cfg.get("socket_timeout", 0.5)
    if cfg.get("restart_delay"):  # a short restart_delay: restarted nodes rejoin quickly
        target = validate_target(cfg["urls"])
        lock_client = connect_target(
            target, socket_timeout=socket_timeout, restart_delay=cfg["restart_delay"]
        )
    else:
        lock_client = connect(cfg["urls"], socket_timeout=socket_timeout)
    limit = cfg.get("limit", 1)
    if limit > 1:  # a counting semaphore: up to ``limit`` clients hold at once
        lock: redlease.Lock | redlease.Semaphore = redlease.Semaphore(
            lock_client, cfg["lock"], limit=limit, ttl=cfg["ttl"], identity=who
        )
    else:
        lock = redlease.Lock(lock_client, cfg["lock"], ttl=cfg["ttl"], identity=who)
    resource = Resource(redis.Redis(port=cfg["resource_port"]), fenced=cfg["fenced"], limit=limit)
    end = now() + cfg["duration"]
    with open(cfg["history"], "a", buffering=1) as out:

        def record(event: str, **fields: Any) -> None:
            out.write(json.dumps({"client": who, "event": event, "mono": now(),
                                  "wall": time.time(), **fields}) + "\n")  # fmt: skip

        while now() < end:
            called = now()
            # giving up at random moments (``give_up``: the longest wait) exercises waiters
            # that leave while a lease is being handed to them
            give_up = cfg.get("give_up")
            timeout = random.uniform(0.0, give_up) if give_up else 1.0
            try:
                lease = lock.acquire(timeout=timeout)
            except redlease.LockError as exc:
                record("acquire_failed", error=type(exc).__name__, called=called)
                time.sleep(0.05)  # back off after a failure (not a synchronisation)
                continue
            returned = now()
            token = lease.fencing_token
            record(
                "acquired", token=token, called=called, returned=returned,
                deadline_in=lease.remaining(),
            )  # fmt: skip
            for _ in range(cfg["writes"]):
                if not lease.valid:
                    record("lost", token=token)
                    break
                busy = now() + cfg["work"]  # the "work" between check and write
                while now() < busy:
                    pass
                sent = now()
                try:
                    ok = resource.write(token, who, sent)
                except redis.RedisError as exc:
                    record("write_error", token=token, error=str(exc))
                    continue
                record("write", token=token, accepted=ok, sent=sent)
            record("releasing", token=token)
            try:
                lock.release()
                record("released", token=token)
            except redlease.NotOwned:
                record("release_refused", token=token)
            except redlease.LockError as exc:
                record("release_failed", token=token, error=type(exc).__name__)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
