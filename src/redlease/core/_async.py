"""Drive :mod:`~redlease.core.protocol` flows with an asyncio client (Redis or RedisCluster)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions as rex

from redlease.core import _log as log
from redlease.core import client as _redis
from redlease.core.protocol import Call, Flow, Replicate, Request, Wait

T = TypeVar("T")


class AsyncNode(_redis.NodeBase):
    """One asyncio Redis client (a single server or a whole cluster) as seen by one lock."""

    async def execute(self, req: Request) -> Any:
        try:
            return await self._execute(req)
        except rex.RedisError as exc:
            raise self.error(exc) from exc

    async def _execute(self, req: Request) -> Any:
        if isinstance(req, Call):
            n = len(req.keys)
            try:
                return await self.client.evalsha(req.script.sha, n, *req.keys, *req.args)
            except rex.NoScriptError:
                return await self.client.eval(req.script.lua, n, *req.keys, *req.args)
        if isinstance(req, Wait):
            # Redis checks blocking timeouts only at its hz tick (100 ms by default): keep the
            # precise deadline here; cancelling the BLPOP drops its connection.
            try:
                async with asyncio.timeout(req.timeout):
                    reply = await self.client.blpop([req.key], timeout=round(req.timeout + 1, 3))
            except TimeoutError:
                return False
            return reply is not None
        if isinstance(req, Replicate):
            if self.cluster:
                node = self.client.get_node_from_key(req.key)
                return await self.client.execute_command(
                    "WAIT", req.replicas, req.timeout_ms, target_nodes=node
                )
            return await self.client.execute_command("WAIT", req.replicas, req.timeout_ms)
        raise TypeError(f"unknown request {req!r}")


async def drive(node: AsyncNode, flow: Flow) -> Any:
    """Run ``flow`` to completion, executing each request it yields on ``node``."""
    reply: Any = None
    while True:
        try:
            req = flow.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = await node.execute(req)


async def run_to_completion(coro: Awaitable[T], limit: float | None = None) -> T:
    """Await ``coro`` even if the caller is cancelled meanwhile; re-raise the cancellation after.

    Used for clean-up and release: a cancelled release still releases.
    """
    task = asyncio.ensure_future(coro)
    cancelled = False
    loop = asyncio.get_running_loop()
    end = None if limit is None else loop.time() + limit
    while True:
        try:
            remaining = None if end is None else max(0.0, end - loop.time())
            result = await asyncio.wait_for(asyncio.shield(task), remaining)
            break
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


async def guarded(node: AsyncNode, flow: Flow, cleanup: Callable[[], Flow]) -> Any:
    """Run ``flow``; if it fails or is cancelled, run ``cleanup()`` (shielded) before re-raising."""
    try:
        return await drive(node, flow)
    except BaseException:
        try:
            await run_to_completion(drive(node, cleanup()), limit=10.0)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.warning("cleanup failed", lock=node.lock, node=node.name, error=str(exc))
        raise
