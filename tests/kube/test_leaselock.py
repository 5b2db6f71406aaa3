"""The Kubernetes Lease as an elector's lock backend, two candidates against KMock over HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest

from redlease.core.timing import Timing
from redlease.devtools.kubeemulator import Emulator, declare
from redlease.election.campaign import Granted, Refused
from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient
from redlease.kube.leaselock import LeaseElectionConfig, LeaseLock
from redlease.kube.leasewriter import LeaseWriter

NS, NAME = "ops", "the-lease"
TIMING = Timing(ttl=15.0, renew_deadline=10.0, retry_period=2.0)


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        client = KubeClient(ClusterAuth(f"http://127.0.0.1:{server.port}"))
        try:
            yield client
        finally:
            await client.close()


def candidate(client: KubeClient, identity: str, clock: list[float]) -> LeaseLock:
    """``identity``'s lock; its monotonic clock is ``clock[0]``, its wall clock 1000 + that."""
    writer = LeaseWriter(client, NS, NAME, {"app": "test"})
    config = LeaseElectionConfig(NS, NAME, identity, TIMING)
    return LeaseLock(writer, config, clock=lambda: clock[0], wall=lambda: 1000 + clock[0])


async def test_one_holder_renews_the_other_waits_then_takes_it_once_released(
    client: KubeClient,
) -> None:
    clock = [0.0]
    a, b = candidate(client, "a", clock), candidate(client, "b", clock)
    first = await a.acquire()
    assert isinstance(first, Granted) and first.sent_at == 0.0 and first.record.holder == "a"
    assert await b.acquire() == Refused("a")
    clock[0] = 2.0
    renewed = await a.renew()
    assert isinstance(renewed, Granted) and renewed.sent_at == 2.0
    assert renewed.record.acquire_time == 1000.0 and renewed.record.renew_time == 1002.0
    assert await b.renew() == Refused("a")  # not its own: the renew deadline decides
    assert await a.release() and not await b.release()
    taken = await b.acquire()
    assert isinstance(taken, Granted) and taken.record.holder == "b"
    assert taken.record.transitions == first.record.transitions + 1
    assert a.loss(RuntimeError("any API error")) is None
