"""The port guard's parking of long requests (pure bookkeeping over stand-in transports); the
guard under real floods is tested on the sidecar's and the operator's ports."""

from __future__ import annotations

import asyncio

from redlease.kube.httpguard import ConnectionGuard


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
