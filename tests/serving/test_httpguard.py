"""The port guard's parking of long requests (pure bookkeeping over stand-in transports), and
how many sockets a flooded port holds (counted every loop pass); the guard under real floods is
tested on the sidecar's and the operator's ports."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

from aiohttp import web

from redlease.serving.httpguard import ConnectionGuard, serve
from redlease.serving.portlimits import port_descriptors


class Transport:
    """What the guard uses of an asyncio transport."""

    def __init__(self) -> None:
        self.aborted = False

    def get_extra_info(self, name: str) -> None:
        return None

    def abort(self) -> None:
        self.aborted = True


async def test_at_most_half_the_cap_parks_and_a_gone_client_stops_waiting() -> None:
    guard = ConnectionGuard(cap=8, timeout=5.0)
    conns = [Transport() for _ in range(6)]
    for t in conns:
        guard.admit(t)  # type: ignore[arg-type]
    gone = [guard.park(t) for t in conns]
    assert guard.park_cap == 4 and guard.parked == 4
    assert [g is not None for g in gone] == [True] * 4 + [False] * 2
    assert guard.park(conns[0]) is None and guard.refused_parks == 3  # one wait per connection
    first = gone[0]
    assert first is not None
    guard.forget(conns[0])  # the client went away
    assert first.is_set()
    guard.unpark(first)
    again = guard.park(conns[4])
    assert again is not None and guard.parked == 4
    # closing: every parked request is told to answer, and the server waits for them
    closing = asyncio.create_task(guard.release_parked(5.0))
    await asyncio.sleep(0)
    parked = [g for g in (*gone[1:4], again) if g is not None]
    assert all(g.is_set() for g in parked) and not closing.done()
    for g in parked:
        guard.unpark(g)
    await asyncio.wait_for(closing, 1.0)
    assert guard.parked == 0 and not any(t.aborted for t in conns)


def sockets_on(port: int) -> int:
    """How many of this process's descriptors are connections accepted on ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local = int(fields[1].rsplit(":", 1)[1], 16)
                if local == port and fields[3] != "0A":  # not the listening socket
                    inodes.add(fields[9])
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            found += link.startswith("socket:[") and link[8:-1] in inodes
    return found


async def test_a_flooded_port_holds_at_most_its_cap_and_its_accepts_in_flight() -> None:
    """100 idle connections queued before the server accepts any (the worst case: asyncio finds
    a full queue every pass). Counted at every loop pass until the last is admitted, the port's
    own sockets never exceed :func:`port_descriptors` (the cap and the sockets still on
    asyncio's accept path), the budget every port is counted at."""
    server = await serve(web.Application(), "127.0.0.1", 0, cap=8)
    flood = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(100)]
    try:
        most, passes = 0, 0
        while server.guard.evicted < len(flood) - server.guard.cap and passes < 10_000:
            most = max(most, sockets_on(server.port))
            passes += 1
            await asyncio.sleep(0)  # one loop pass
        assert server.guard.evicted == len(flood) - server.guard.cap
        assert server.guard.cap < most <= port_descriptors(server.guard.cap)
    finally:
        for s in flood:
            s.close()
        await server.close()
