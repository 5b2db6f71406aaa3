"""A real Sentinel failover: a master, replicas (``--replicaof``) and three Sentinels on free
ports (:class:`~redlease.devtools.localsentinel.SentinelDeployment`). The master is SIGKILLed,
the Sentinels promote a replica, and leases resume on the new master: for the library (sync
and asyncio) and for a `redlease sidecar` process on ``redis+sentinel://``. With
``replicas=1`` the lease and the fence counter were confirmed on a replica before the grant
returned, so the holder keeps its lease and fencing tokens never go back.

The window an *asynchronous* failover leaves open (a holder that still believes it leads
while the promoted replica lets someone else in) is measured in
:mod:`sentinel_window` (docs/safety.md); a quick trial of each side runs here, the full
measurement is marked slow and long (`make test-long`)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

import redlease.aio
from bench.sentinel_window import MODES, Mode, trial
from redlease import Lock, LockContention, LockUnavailable
from redlease.core.connect import connect
from redlease.devtools.localredis import RedisServer
from redlease.devtools.localsentinel import SentinelDeployment
from redlease.devtools.sidecarprocs import Sidecar, wait_until

T = TypeVar("T")
FAILOVER = 60.0  # generous: ~2-3 s on an idle machine


@pytest.fixture
def deployment() -> Iterator[SentinelDeployment]:
    """Two replicas: after a failover one is left, so ``WAIT 1`` can still be confirmed."""
    with SentinelDeployment(replicas=2) as d:
        yield d


def name() -> str:
    return f"sentinel-{uuid.uuid4().hex[:8]}"


def attempt(call: Callable[[], T]) -> T | None:
    """``call()``, or None while the failover is under way (refused, unreachable, too few
    replicas confirmed yet)."""
    try:
        return call()
    except (LockContention, LockUnavailable):
        return None


def holder_on(server: RedisServer, lock: str) -> Any:
    client = server.client()
    try:
        return Lock(client, lock).state()
    finally:
        client.close()


def test_sync_lease_survives_failover(deployment: SentinelDeployment) -> None:
    lock = name()
    client = connect([deployment.url], socket_timeout=2.0)
    try:
        holder = Lock(client, lock, ttl=30, identity="a", replicas=1, replica_timeout=2.0)
        first = holder.acquire(timeout=10)
        old = deployment.current_master()
        old.kill()
        new = deployment.wait_failover(old, timeout=FAILOVER)

        # the lease was replicated before it was granted: it lives on the promoted master
        state = holder_on(new, lock)
        assert (state.holder, state.fencing_token) == ("a", first.fencing_token)
        renewed = wait_until(lambda: attempt(holder.extend), timeout=FAILOVER)
        assert renewed.fencing_token == first.fencing_token and renewed.valid
        other = Lock(client, lock, ttl=5, identity="b", replicas=1, replica_timeout=2.0)
        with pytest.raises(LockContention):
            other.acquire(blocking=False)
        holder.release()

        second = wait_until(lambda: attempt(lambda: other.acquire(timeout=1)), timeout=FAILOVER)
        assert second.fencing_token > first.fencing_token  # never backwards
        assert holder_on(new, lock).holder == "b"
        other.release()
    finally:
        client.close()


async def test_asyncio_lease_survives_failover(deployment: SentinelDeployment) -> None:
    import asyncio

    lock = name()
    client = connect([deployment.url], asyncio=True, socket_timeout=2.0)
    try:
        holder = redlease.aio.Lock(
            client, lock, ttl=30, identity="a", replicas=1, replica_timeout=2.0
        )
        first = await holder.acquire(timeout=10)
        old = deployment.current_master()
        old.kill()
        new = await asyncio.to_thread(deployment.wait_failover, old, FAILOVER)

        deadline = time.monotonic() + FAILOVER
        while True:  # renew on the promoted master (poll with a deadline)
            try:
                renewed = await holder.extend()
                break
            except LockUnavailable:
                assert time.monotonic() < deadline, "no renewal after the failover"
                await asyncio.sleep(0.05)
        assert renewed.fencing_token == first.fencing_token
        assert holder_on(new, lock).holder == "a"
        await holder.release()

        other = redlease.aio.Lock(client, lock, ttl=5, identity="b", replicas=1)
        second = await other.acquire(timeout=FAILOVER)
        assert second.fencing_token > first.fencing_token
        await other.release()
    finally:
        await client.aclose()


def test_sidecar_leads_again_after_failover(deployment: SentinelDeployment) -> None:
    """A sidecar with ``--replicas 1``: leads, the master is SIGKILLed, it leads again on the
    promoted master (same term: its lease was replicated), renewing there."""
    lock = name()
    sc = Sidecar(
        "pod-0",
        lock,
        [deployment.url],
        ttl=30,
        renew_deadline=20,
        retry_period=0.2,
        extra=["--replicas", "1", "--replica-timeout", "2"],
    ).start()
    try:
        sc.wait_up(30)
        before = wait_until(lambda: (doc := sc.status()) and doc["leader"] and doc, 30)
        old = deployment.current_master()
        old.kill()
        new = deployment.wait_failover(old, timeout=FAILOVER)

        def renewed_on_new_master() -> Any:
            doc = sc.status()
            state = holder_on(new, lock)
            # a renewal on the new master pushes the expiry back above the TTL left before
            fresh = state.expires_in_ms is not None and state.expires_in_ms > 28_000
            seen = doc and doc["leader"] and doc["nodes"]["healthy"] == 1  # the view too
            return seen and state.holder == "pod-0" and fresh and doc

        after = wait_until(renewed_on_new_master, timeout=FAILOVER)
        assert after["fencing_token"] == before["fencing_token"]  # the same term, kept
        assert after["transitions"] == before["transitions"]
    finally:
        sc.stop()


async def test_elector_fails_closed_and_follows_replicas() -> None:
    """The sidecar's elector with ``replicas`` on a master without replicas: a change to
    ``replicas=1`` (as from ``spec.replicas``) makes the leader step down; every acquisition
    after it fails closed (undone: nobody holds the lock); without WAIT it leads again."""
    import asyncio

    from redlease.core.connect import validate_target
    from redlease.core.timing import validate_timing
    from redlease.sidecar.config import ElectionConfig
    from redlease.sidecar.elector import Hooks, SidecarElector

    errors: list[str] = []

    class Record(Hooks):
        def error(self, kind: str) -> None:
            errors.append(kind)

    async def until(check: Callable[[], Any], what: str) -> None:
        deadline = time.monotonic() + 30
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    lock = name()
    with RedisServer() as server:
        config = ElectionConfig(
            keys=(lock,),
            identity="pod-0",
            target=validate_target([server.url]),
            timing=validate_timing(3, 2, 0.1),
        )
        elector = SidecarElector(config, Record())
        task = asyncio.create_task(elector.run())
        try:
            await until(elector.leading, "leading without WAIT")
            elector.reconfigure(dataclasses.replace(config, replicas=1, replica_timeout=0.05))
            await until(lambda: not elector.leading(), "step-down on the new rule")
            await until(lambda: errors.count("ReplicationError") >= 2, "failed-closed attempts")
            assert not elector.leading()
        finally:
            elector.stop()
            await asyncio.wait_for(task, 30)
        # stopped (no attempt in flight), well within the TTL: every refused grant was undone
        assert holder_on(server, lock).holder is None

        again = SidecarElector(config)
        task = asyncio.create_task(again.run())
        try:
            await until(again.leading, "leading again without WAIT")
        finally:
            again.stop()
            await asyncio.wait_for(task, 30)


@pytest.mark.parametrize("mode", [MODES[1], MODES[3]], ids=["no-wait", "replicas-1"])
def test_async_failover_window_quick(mode: Mode) -> None:
    """One trial each: without WAIT a replica behind at the crash lets a second client in
    while the first still holds (a lost lease; fencing still orders them: the promoted
    replica's token is seeded from its clock); with ``replicas=1`` the first grant fails closed
    (ReplicationError) and nobody is doubled. (2 s of lag here,
    so that even a stalled test process cuts the link before the grant gets through.)"""
    result = trial(dataclasses.replace(mode, lag=2.0))
    if mode.replicas:
        assert not result.held and result.error == "ReplicationError"
        assert not result.lost
    else:
        assert result.held and result.lost and result.overlap_ms > 0
        assert result.token_b is not None and result.token_a is not None
        assert result.token_b > result.token_a  # though the promoted replica never saw A's


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.timeout(900)
def test_async_failover_window_measured() -> None:
    """The measurement of docs/safety.md, smaller: 5 trials per mode. Without WAIT and a
    lagging replica every lease is lost; with replicas=1 none is."""
    for mode in MODES:
        results = [trial(mode) for _ in range(5)]
        lost = sum(r.lost for r in results)
        if mode.replicas:
            assert lost == 0, mode
        elif mode.lag:
            assert lost == 5, mode
