"""What the client process spends per uncontended acquire+release pair, in counts that neither
the machine's load nor its speed moves: ``python -m bench.client``.

Pairs per second on a shared 2-core machine move ±20 % from run to run, so the client lead over
redis-py's ``Lock`` slipped from 1.3x to 1.0x without a figure showing it (issue 39). Counted
here, for redlease's ``Lock`` and ``aio.Lock`` next to redis-py's and ``redis.asyncio``'s:

- ``python_calls``: Python-level function calls per pair (``sys.setprofile``'s ``call``
  events), the interpreter work of the library and of the redis-py layers under it;
- ``builtin_calls``: calls of C functions and methods (``c_call`` events);
- ``io_calls``: of those, the socket and poll calls (each one a system call): a redis-py
  release that adds a readiness check per request shows here at once;
- ``instructions`` (with ``--instructions``, needs valgrind): every user-space instruction
  the client process executes per pair under callgrind, Python's own work included.

The first three depend only on the code, Python's minor version and the pinned redis-py, so a
test (tests/devtools/test_client_calls.py) holds redlease to the figures committed in
bench/client.json; the instruction count depends on the Python build too, so it is reported
(``make bench``, docs/benchmarks.md), not guarded.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import select
import shutil
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "bench" / "client.json"
WARM_UP = 50
PAIRS = 200
IO_NAMES = frozenset(
    {"poll", "select", "recv", "recv_into", "recvfrom", "send", "sendall", "sendto", "sendmsg"}
)
# what those are methods of (a generator's ``send`` is not I/O; ``select.poll()`` makes a poller)
IO_OBJECTS = (
    socket.socket,
    type(select.poll()),
    *([select.epoll] if hasattr(select, "epoll") else []),
)
CONTENDERS = ("redlease Lock", "redis-py Lock", "redlease aio.Lock", "redis.asyncio Lock")
ASYNCIO = frozenset({"redlease aio.Lock", "redis.asyncio Lock"})
OURS = {"redlease Lock": "redis-py Lock", "redlease aio.Lock": "redis.asyncio Lock"}
# how far a guarded count may grow over the committed figure before the guard fails
HEADROOM = 1.10


class _Counter:
    """A ``sys.setprofile`` hook counting calls by kind."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            self.counts["python_calls"] += 1
        elif event == "c_call":
            self.counts["builtin_calls"] += 1
            if getattr(arg, "__name__", "") in IO_NAMES and isinstance(
                getattr(arg, "__self__", None), IO_OBJECTS
            ):
                self.counts["io_calls"] += 1


def _sync_pair(name: str, port: int) -> Callable[[], None]:
    import redis

    import redlease

    client = redis.Redis(host="127.0.0.1", port=port)
    if name == "redlease Lock":
        lock: Any = redlease.Lock(client, "client-rl", ttl=10)
    else:
        lock = client.lock("client-rp", timeout=10)

    def pair() -> None:
        lock.acquire()
        lock.release()

    return pair


def _async_pair(name: str, port: int) -> Callable[[], Awaitable[None]]:
    import redis.asyncio as aioredis

    from redlease import aio

    client = aioredis.Redis(host="127.0.0.1", port=port)
    if name == "redlease aio.Lock":
        lock: Any = aio.Lock(client, "client-arl", ttl=10)
    else:
        lock = client.lock("client-arp", timeout=10)

    async def pair() -> None:
        await lock.acquire()
        await lock.release()

    return pair


def counts(name: str, port: int, pairs: int = PAIRS) -> dict[str, float]:
    """Calls per pair of contender ``name`` against the redis-server on ``port``."""
    counter = _Counter()
    if name in ASYNCIO:
        make = _async_pair

        async def run() -> None:
            pair = make(name, port)
            for _ in range(WARM_UP):
                await pair()
            sys.setprofile(counter)
            try:
                for _ in range(pairs):
                    await pair()
            finally:
                sys.setprofile(None)

        asyncio.run(run())
    else:
        pair = _sync_pair(name, port)
        for _ in range(WARM_UP):
            pair()
        sys.setprofile(counter)
        try:
            for _ in range(pairs):
                pair()
        finally:
            sys.setprofile(None)
    keys = ("python_calls", "builtin_calls", "io_calls")
    return {k: round(counter.counts[k] / pairs, 2) for k in keys}


_WORKER = """
import sys
sys.path[:0] = {paths!r}
from bench import client
import asyncio
name, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if name in client.ASYNCIO:
    async def run():
        pair = client._async_pair(name, port)
        for _ in range(client.WARM_UP + n):
            await pair()
    asyncio.run(run())
else:
    pair = client._sync_pair(name, port)
    for _ in range(client.WARM_UP + n):
        pair()
"""


def instructions(name: str, port: int, pairs: int = 1000) -> float:
    """User-space instructions per pair of the client process under callgrind: a run with
    ``pairs`` more pairs than another, the difference divided (start-up and warm-up cancel)."""

    def total(n: int) -> int:
        code = _WORKER.format(paths=[str(ROOT), str(ROOT / "src")])
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             sys.executable, "-c", code, name, str(port), str(n)],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        found = re.search(r"Collected : (\d+)", out)
        if found is None:
            raise RuntimeError(f"no instruction count from callgrind for {name!r}")
        return int(found.group(1))

    return (total(pairs) - total(0)) / pairs


def scenario(with_instructions: bool | None = None, log: Callable[[str], None] = print) -> Any:
    """Every contender's counts (and instructions where valgrind is on PATH, unless told)."""
    from redlease.devtools.localredis import RedisServer

    if with_instructions is None:
        with_instructions = shutil.which("valgrind") is not None
    found: dict[str, dict[str, float | None]] = {}
    with RedisServer() as server:
        for name in CONTENDERS:
            row: dict[str, float | None] = dict(counts(name, server.port))
            row["instructions"] = instructions(name, server.port) if with_instructions else None
            found[name] = row
            log(f"  client {name:20s} {row}")
    return {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "per_pair": found}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.client", description=__doc__.split("\n")[0])
    ap.add_argument("--instructions", action="store_true", help="also count under callgrind")
    ap.add_argument("--write", action="store_true", help=f"commit the counts to {COMMITTED}")
    args = ap.parse_args(argv)
    result = scenario(args.instructions)
    per = result["per_pair"]
    for ours, theirs in OURS.items():
        for key in ("python_calls", "io_calls", "instructions"):
            if per[ours][key] and per[theirs][key]:
                print(f"  {ours} {key}: {per[ours][key] / per[theirs][key]:.2f}x {theirs}")
    if args.write:
        guarded = {
            name: {k: v for k, v in row.items() if k != "instructions"} for name, row in per.items()
        }
        text = json.dumps({"python": result["python"], "per_pair": guarded}, indent=2)
        COMMITTED.write_text(text + "\n")
        print(f"wrote {COMMITTED}")


if __name__ == "__main__":
    main()
