"""A step of the Redis host's wall clock (Redis expires leases by it) is detected by the holder
at its next renewal: it steps down, gives the lease back and says why (docs/safety.md)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

import redlease
from redlease import ClockStepped, aio
from redlease.core.clock import ServerTime, clock_step
from redlease.core.timing import drift
from redlease.devtools import clockstep

# --- the rule (pure) ---------------------------------------------------------------------------


def test_a_reading_within_its_interval_is_no_step() -> None:
    before = ServerTime(1_000_000, sent=10.0, received=10.001)
    # 5 s later on both clocks, the second request stalled 2 s on a busy machine
    after = ServerTime(1_005_000, sent=14.999, received=17.0)
    assert clock_step(before, after, ttl=15) == 0.0


def test_forward_and_backward_steps_beyond_the_allowance() -> None:
    before = ServerTime(1_000_000, sent=10.0, received=10.001)
    ahead = ServerTime(1_000_000 + 5_000 + 30_000, sent=15.0, received=15.001)
    assert clock_step(before, ahead, ttl=15) == pytest.approx(30.0 - 0.001, abs=0.002)
    behind = ServerTime(1_000_000 + 5_000 - 2_000, sent=15.0, received=15.001)
    assert clock_step(before, behind, ttl=15) == pytest.approx(-2.0 + 0.001, abs=0.002)


def test_the_allowance_is_the_drift_allowance() -> None:
    before = ServerTime(0, sent=0.0, received=0.0)
    slack = drift(15) + 0.002
    just_in = ServerTime(round((5 + slack - 0.001) * 1000), sent=5.0, received=5.0)
    just_out = ServerTime(round((5 + slack + 0.002) * 1000), sent=5.0, received=5.0)
    assert clock_step(before, just_in, ttl=15) == 0.0
    assert clock_step(before, just_out, ttl=15) > 0


# --- a real server whose clock steps -------------------------------------------------------------


@pytest.fixture
def stepped() -> Iterator[clockstep.SteppableServer]:
    why = clockstep.unavailable()
    if why:
        pytest.skip(why)
    server = clockstep.SteppableServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("seconds", [2, 30], ids=["within-ttl", "past-ttl"])
def test_extend_after_a_forward_step_steps_down(
    stepped: clockstep.SteppableServer, seconds: int
) -> None:
    client = stepped.server.client()
    lock = redlease.Lock(client, "stepped", ttl=5, identity="a")
    lease = lock.acquire()
    stepped.step(seconds)
    with pytest.raises(ClockStepped) as err:
        lock.extend()
    assert "stepped forward" in err.value.message
    assert not lease.valid and lock.lease() is None
    # given back (or already expired by the stepped clock): a standby takes it at once
    other = redlease.Lock(client, "stepped", ttl=5, identity="b").acquire(blocking=False)
    assert other.fencing_token > lease.fencing_token
    client.close()


def test_a_backward_step_is_reported_too(stepped: clockstep.SteppableServer) -> None:
    client = stepped.server.client()
    lock = redlease.Lock(client, "back", ttl=5)
    lock.acquire()
    stepped.step(-3)
    with pytest.raises(ClockStepped) as err:
        lock.extend()
    assert "stepped back" in err.value.message
    client.close()


def test_no_step_no_alarm(stepped: clockstep.SteppableServer) -> None:
    client = stepped.server.client()
    lock = redlease.Lock(client, "steady", ttl=5)
    lease = lock.acquire()
    for _ in range(3):
        assert lock.extend() is lease and lease.valid
    client.close()


def test_the_renewer_loses_the_lease_with_the_reason(stepped: clockstep.SteppableServer) -> None:
    client = stepped.server.client()
    lost: list[redlease.LeaseLost] = []
    done = threading.Event()

    def on_lost(err: redlease.LeaseLost) -> None:
        lost.append(err)
        done.set()

    lock = redlease.Lock(client, "renewed", ttl=1.5)
    with lock.hold(on_lost=on_lost) as lease:
        stepped.step(30)
        assert done.wait(10)
        assert lease.lost
    assert "clock stepped forward" in lost[0].message
    client.close()


async def test_asyncio_extend_after_a_step(stepped: clockstep.SteppableServer) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=stepped.server.port)
    lock = aio.Lock(client, "aio-stepped", ttl=5, identity="a")
    await lock.acquire()
    stepped.step(2)
    with pytest.raises(ClockStepped):
        await lock.extend()
    assert lock.lease() is None
    assert (await lock.state()).holder is None  # given back at once
    await client.aclose()
