"""The refresh cycle's pause of the cyclic garbage collector (redlease.operator.collector) and
the cadence wait that keeps the pause to the cycle's work (Refresher.due)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from redlease.operator.collector import Pause


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was:
            gc.disable()


def test_pause_disables_and_resumes(collector_on: None) -> None:
    pause = Pause()
    with pause():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_resume_after_the_outermost(collector_on: None) -> None:
    pause = Pause()
    with pause():
        with pause():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_pause_resumes_after_an_error(collector_on: None) -> None:
    pause = Pause()
    with pytest.raises(RuntimeError), pause():
        raise RuntimeError("cycle failed")
    assert gc.isenabled()


def test_pause_leaves_a_disabled_collector_disabled(collector_on: None) -> None:
    pause = Pause()
    gc.disable()
    with pause():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_in_threads_resume_after_the_last(collector_on: None) -> None:
    pause = Pause()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with pause():
            inside.set()
            leave.wait(30)

    t = threading.Thread(target=other)
    with pause():
        t.start()
        assert inside.wait(30)
    assert not gc.isenabled()  # the other thread's pause still holds
    leave.set()
    t.join(30)
    assert gc.isenabled()


async def test_a_pause_ends_at_its_limit(collector_on: None) -> None:
    from redlease.devtools.polling import async_wait_until

    pause = Pause()
    async with pause.at_most(0.05):
        assert not gc.isenabled()

        async def resumed() -> bool:
            return gc.isenabled()

        await async_wait_until(resumed, timeout=30)  # the block still runs: resumed
        with pause():  # a pause opened meanwhile does not stop it again
            assert gc.isenabled()
    assert gc.isenabled()


async def test_a_pause_within_its_limit_resumes_once(collector_on: None) -> None:
    pause = Pause()
    async with pause.at_most(30):
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    async with pause.at_most(30):
        pause.expire()  # the expiry of a pause of a disabled collector enables nothing
    assert not gc.isenabled()


async def test_refresher_due_waits_for_the_cadence() -> None:
    from redlease.core import view as lockview
    from redlease.kube.spec import parse_spec
    from redlease.operator.refresher import Observation, Refresher

    async def read(requests: Any) -> list[Observation]:
        return [(lockview.empty(["job"], 1, 1), 0.0) for _ in requests]

    refresher = Refresher(read, interval=0.5)
    task = asyncio.ensure_future(refresher.run())
    try:
        t0 = time.monotonic()
        await refresher.due()  # no cycle yet: the first one may start at once
        spec = parse_spec({"keys": ["job"], "nodes": [{"url": "redis://127.0.0.1:1"}]})
        await refresher.observe(spec)
        await refresher.due()
        # not before the interval since that cycle started (t0 or later); a little slack for
        # the loop's clock resolution
        assert time.monotonic() - t0 >= 0.45
    finally:
        task.cancel()


async def test_cycle_reads_with_the_collector_paused(
    collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cycle holds every lock from its preparation to its status: the collector is off
    meanwhile (so those objects are not promoted), and on again once the cycle is over."""
    from redlease.core import view as lockview
    from redlease.kube.auth import ClusterAuth
    from redlease.operator.config import OperatorConfig
    from redlease.operator.runtime import Runtime

    runtime = Runtime(OperatorConfig(namespaces=("a",), kube=ClusterAuth("http://127.0.0.1:9")))
    seen: list[bool] = []

    async def scope(namespace: str) -> str | None:
        seen.append(gc.isenabled())
        return None  # no Namespace read: nothing answers on the cluster address

    async def observe_all(requests: Any) -> list[Any]:
        seen.append(gc.isenabled())
        return [(lockview.empty(["job"], 1, 1), time.time()) for _ in requests]

    monkeypatch.setattr(runtime.secrets, "scope", scope)
    monkeypatch.setattr(runtime.refresher, "observe_all", observe_all)
    monkeypatch.setattr(runtime.events, "post", lambda *a, **k: None)  # kopf's, not running
    body = {
        "metadata": {"name": "l", "namespace": "a", "uid": "u1", "generation": 1},
        "spec": {"keys": ["job"], "nodes": [{"url": "redis://127.0.0.1:1"}]},
    }
    runtime.track("u1", body)  # type: ignore[arg-type]
    try:
        await runtime.cycle()
        assert seen == [False, False]
        assert gc.isenabled()
        assert "u1" in runtime.written  # the status was computed and queued
    finally:
        await runtime.stop()
