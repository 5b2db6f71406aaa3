"""The one Lease compare-and-swap writer against an emulated API server (KMock over HTTP).

Two writers on one Lease: a write lands only on the version its writer read, the loser gets
``KubeConflict`` (a stale swap, a create of a Lease that exists, a swap of a deleted one), and
a release happens only while the Lease names the releaser.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import kmock
import pytest

from redlease.devtools.kubeemulator import LEASES, Emulator, declare
from redlease.errors import KubeConflict
from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient
from redlease.kube.lease import LeaseRecord
from redlease.kube.leasewriter import LeaseWriter

NS, NAME = "ops", "the-lease"
HELD = LeaseRecord("a", 5, 100.0, 100.0, 0)


@pytest.fixture
async def api() -> AsyncIterator[tuple[Emulator, KubeClient]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        client = KubeClient(ClusterAuth(f"http://127.0.0.1:{server.port}"))
        try:
            yield emulator, client
        finally:
            await client.close()


def writer(client: KubeClient) -> LeaseWriter:
    return LeaseWriter(client, NS, NAME, {"app": "test"})


async def test_a_write_lands_only_on_the_version_read(api: tuple[Emulator, KubeClient]) -> None:
    _, client = api
    a, b = writer(client), writer(client)
    assert await a.read() is None
    created = await a.write(None, HELD)
    assert created["metadata"]["labels"] == {"app": "test"}
    with pytest.raises(KubeConflict):
        await b.write(None, LeaseRecord("b", 5, 101.0, 101.0, 1))  # it exists already

    seen = await b.read()
    assert seen is not None and LeaseRecord.of(seen) == HELD
    renewed = replace(HELD, renew_time=102.0)
    await a.write(seen, renewed)  # a renews on the version both read
    with pytest.raises(KubeConflict):
        await b.write(seen, LeaseRecord("b", 5, 103.0, 103.0, 1))  # b's version is gone
    now = await b.read()
    assert now is not None and LeaseRecord.of(now) == renewed


async def test_release_only_by_the_holder(api: tuple[Emulator, KubeClient]) -> None:
    _, client = api
    a, b = writer(client), writer(client)
    assert not await a.release("a", 104.0)  # no Lease: nothing to release
    await a.write(None, HELD)
    assert not await b.release("b", 104.0)
    assert await a.release("a", 104.0)
    lease = await b.read()
    assert lease is not None and LeaseRecord.of(lease) == HELD.released(104.0)


async def test_a_deleted_lease_is_a_conflict(api: tuple[Emulator, KubeClient]) -> None:
    emulator, client = api
    a = writer(client)
    await a.write(None, HELD)
    seen = await a.read()
    del emulator.objects[LEASES, NS, NAME]
    with pytest.raises(KubeConflict):
        await a.write(seen, replace(HELD, renew_time=105.0))
