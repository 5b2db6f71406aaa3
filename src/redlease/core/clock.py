"""Clocks: the local monotonic clock a flow reads, and readings of a Redis server's clock.

Redis expires a lease by the server's wall clock; the local deadline is kept on the monotonic
clock (:func:`redlease.core.timing.local_deadline`). :func:`clock_step` tells when the two
disagree by more than the drift allowance, so a renewer steps down (checked in
:func:`redlease.core.flows.extend`; tests/core/test_clock_step.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from redlease.core.timing import drift

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ServerTime:
    """One reading of a server's clock: ``server_ms`` (``TIME`` in a script) was read between
    ``sent`` and ``received`` on the local monotonic clock."""

    server_ms: int
    sent: float
    received: float


def clock_step(before: ServerTime, after: ServerTime, ttl: float) -> float:
    """Seconds the server's wall clock moved between two readings beyond what the local
    monotonic clock allows: > 0 a forward step, < 0 a backward one, 0 within the drift allowance
    (:func:`drift` of the longer of the TTL and the interval, plus 2 ms for two readings in
    whole milliseconds). Sound under any load: each reading lies inside its own interval."""
    moved = (after.server_ms - before.server_ms) / 1000
    longest = after.received - before.sent
    shortest = after.sent - before.received
    slack = drift(max(ttl, longest)) + 0.002
    if moved > longest + slack:
        return moved - longest
    if moved < shortest - slack:
        return moved - shortest
    return 0.0
