"""KubeClient.stream (the sidecar's --lock-ref watch) against a real HTTP server that streams
events: its deadline ends the watch with TimeoutError, also when it passes while the reader is
busy with an event."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient

EVENT = b'{"type": "MODIFIED", "object": {"metadata": {"name": "orders"}}}\n'


@pytest.fixture
async def events_url() -> AsyncIterator[str]:
    """An endpoint that streams one watch event every 10 ms until the client goes."""

    async def watch(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        with contextlib.suppress(ConnectionResetError):  # the client went
            while True:
                await resp.write(EVENT)
                await asyncio.sleep(0.01)
        return resp

    app = web.Application()
    app.router.add_get("/watch", watch)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_the_deadline_passing_while_the_reader_handles_an_event_is_a_timeout(
    events_url: str,
) -> None:
    """The sidecar's follower handles each event (it reads the DistributedLock's Namespace
    over the API) before it asks for the next one. Before: the deadline was an asyncio.timeout
    around the ``yield``, so when it passed during that handling it cancelled the follower's
    own task: no TimeoutError, no resync, and the sidecar never saw a spec change again (found
    by `make soak`'s node-set change)."""
    client = KubeClient(ClusterAuth(events_url))
    seen = 0

    async def follow() -> None:
        nonlocal seen
        async for event in client.stream("/watch", 0.3):
            assert event["object"]["metadata"]["name"] == "orders"
            seen += 1
            await asyncio.sleep(0.05)  # handling the event, most of the time between reads

    task = asyncio.create_task(follow())
    try:
        await asyncio.wait({task}, timeout=10)
        assert task.done()
        assert not task.cancelled(), "the watch's deadline cancelled its reader"
        assert isinstance(task.exception(), TimeoutError)
        assert seen >= 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
