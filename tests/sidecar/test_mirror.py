"""The Lease mirror and the leader Events of real sidecars, against KMock over HTTP.

Two sidecars with ``--lease-mirror --events`` on one redis-server: the leader keeps the Lease
named after the lock (holder, duration, times, transitions), writing at most once per retry
period; the standby never writes; a transition moves holder and transitions; an outage of the
API (refused, then hanging) never changes who leads, and the mirror catches up afterwards.
Writers are told apart by the User-Agent the sidecar sends (its pod name).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path

import kmock
import pytest
import yaml

from redlease.devtools.kubeemulator import LEASES, Emulator, declare
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Observer, Sidecar, env, until
from redlease.kube.lease import LeaseRecord

NS = "shop"
LOCK = "mirror-lock"
RETRY = 0.1  # the sidecars' retry period (procs.Sidecar's default)


def record(api: Emulator) -> LeaseRecord | None:
    try:
        obj = api.objects[LEASES, NS, LOCK]
    except KeyError:
        return None
    return None if obj.deleted else LeaseRecord.of(obj.raw)


def writes(api: Emulator) -> list[tuple[float, str]]:
    """(request index, writer pod) of every create or patch of the mirrored Lease."""
    out = []
    for i, r in enumerate(list(api._requests)):
        if r.resource is None or r.resource.plural != "leases":
            continue
        if r.action in (kmock.action.CREATE, kmock.action.UPDATE):
            agent = str(r.headers.get("User-Agent", ""))
            out.append((i, agent.rsplit("(", 1)[-1].rstrip(")")))
    return out


def leader_events(api: Emulator) -> list[str]:
    return [
        str(o.raw.get("message"))
        for (res, ns, _), o in list(api.objects.items())
        if res.plural == "events" and ns == NS and o.raw.get("reason") == "LeaderElection"
    ]


@pytest.mark.slow
async def test_lease_mirror_and_events(redis_server: RedisServer, tmp_path: Path) -> None:
    async with Emulator() as api, kmock.Server(api) as srv:
        declare(api)
        base = f"http://127.0.0.1:{srv.port}"
        scs: dict[str, Sidecar] = {}

        def start(pod: str) -> Sidecar:
            sc = Sidecar(
                pod, LOCK, [redis_server.url],
                extra=["--lease-mirror", "--events", "--kube-api", base],
                environ=env(POD_NAME=pod, POD_NAMESPACE=NS),
            ).start()  # fmt: skip
            scs[pod] = sc
            return sc

        try:
            await scenario(api, start, scs, tmp_path)
        finally:
            for sc in scs.values():
                sc.stop()


async def scenario(
    api: Emulator, start: Callable[[str], Sidecar], scs: dict[str, Sidecar], tmp_path: Path
) -> None:
    a = start("pod-a")
    await until(a.is_leader, what="pod-a leads")
    b = start("pod-b")
    await until(lambda: b.status() is not None, what="pod-b up")
    first = await until(lambda: (r := record(api)) and r.holder == "pod-a" and r, what="mirror")
    doc = a.status()
    assert doc is not None
    assert first.duration == 2  # ceil(ttl 1.5 s): never shorter than the lease in Redis
    assert first.acquire_time is not None and first.renew_time is not None
    assert first.transitions == doc["transitions"]

    # the leader writes renewals at most once per retry period; the standby never writes
    with Observer([a, b]) as seen:
        before, t0 = len(writes(api)), time.monotonic()
        await asyncio.sleep(1.5)
        window = writes(api)[before:]
        elapsed = time.monotonic() - t0
        assert window and {w for _, w in window} == {"pod-a"}
        assert len(window) <= elapsed / RETRY + 1, (len(window), elapsed)
        renewed = record(api)
        assert renewed is not None and renewed.renew_time > first.renew_time  # type: ignore[operator]

        # a transition: the leader is killed; pod-b takes over and the mirror follows
        a.signal(signal.SIGKILL)
        killed_at = len(api._requests)
        took = await until(
            lambda: (r := record(api)) and r.holder == "pod-b" and r, what="pod-b in the mirror"
        )
        took_at = time.monotonic()
        lease = api.objects[LEASES, NS, LOCK].raw
        (tmp_path / "lease.yaml").write_text(yaml.safe_dump(dict(lease), sort_keys=False))
        assert took.transitions == first.transitions + 1
        assert took.acquire_time > first.acquire_time  # type: ignore[operator]
        assert not [i for i, w in writes(api) if w == "pod-b" and i < killed_at]

        # an API outage (refused, then unanswered) never changes who leads
        for mode in ("refuse", "hang"):
            api.outage = mode
            await asyncio.sleep(3 * 1.5)  # three TTLs
            api.outage = None
            assert b.is_leader(), mode
            after = record(api)
            await until(
                lambda after=after: (r := record(api)) and r.renew_time > after.renew_time,  # type: ignore[union-attr]
                what=f"the mirror catches up after {mode}",
            )
        assert seen.violations() == []
        since = [s for s in list(seen.samples) if s.identity == "pod-b" and s.sent > took_at]
        assert since and all(s.leader for s in since)  # led without a break, outages and all

    # Events: one per change of this process's own leadership, on the Lease named after the lock
    await until(lambda: "pod-b became leader" in " ".join(leader_events(api)), what="events")
    messages = leader_events(api)
    assert len([m for m in messages if m.startswith("pod-a became leader")]) == 1, messages
    assert len([m for m in messages if m.startswith("pod-b became leader")]) == 1, messages
    assert len(messages) == len(set(messages))
    event = next(o.raw for (res, _, _), o in api.objects.items() if res.plural == "events")
    assert event["involvedObject"]["kind"] == "Lease" and event["involvedObject"]["name"] == LOCK

    # SIGTERM: released in Redis, "stopped leading" posted, the mirror marked released
    b.signal(signal.SIGTERM)
    assert await asyncio.to_thread(b.wait) == 0
    final = record(api)
    assert final is not None and final.holder is None
    assert any(m.startswith("pod-b stopped leading") for m in leader_events(api))
    assert "Traceback" not in b.log()
