"""A batch of scripts written back to back (the waiter listener's LEAVEs) on a server that lost
its scripts: the first failed call runs alone (it loads the script), the others go again in one
write, not one round trip each (real servers; SCRIPT FLUSH and, where there are Functions,
FUNCTION FLUSH)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
import redis
import redis.asyncio

import redlease
import redlease.aio
from redlease.core.requests import Call
from redlease.devtools.localredis import RedisServer


def _flush(server: RedisServer) -> None:
    with server.client() as admin:
        admin.script_flush()
        with contextlib.suppress(redis.ResponseError):  # Redis 6.2: no Functions
            admin.execute_command("FUNCTION", "FLUSH")


def _leaves(lock: Any, n: int) -> list[Call]:
    """``n`` LEAVEs of tokens registered nowhere: harmless, each answers."""
    return [lock.prim.leave(f"token-{i}") for i in range(n)]


def test_a_flushed_batch_runs_one_call_alone(
    redis_server: RedisServer, lock_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    try:
        lock = redlease.Lock(client, lock_name)
        node = lock._node
        calls = _leaves(lock, 20)
        node.run_all(calls)  # the server's scripts are checked and loaded
        _flush(redis_server)
        alone: list[Call] = []
        execute = node.execute

        def counted(call: Call) -> Any:
            alone.append(call)
            return execute(call)

        monkeypatch.setattr(node, "execute", counted)
        node.run_all(calls)
        assert alone == [calls[0]]
        node.run_all(calls)  # loaded again: nothing runs alone
        assert alone == [calls[0]]
    finally:
        client.close()


def test_a_flushed_batch_runs_one_call_alone_asyncio(
    redis_server: RedisServer, lock_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        try:
            lock = redlease.aio.Lock(client, lock_name)
            node = lock._node
            calls = _leaves(lock, 20)
            await node.run_all(calls)
            _flush(redis_server)
            alone: list[Call] = []
            execute = node.execute

            async def counted(call: Call) -> Any:
                alone.append(call)
                return await execute(call)

            monkeypatch.setattr(node, "execute", counted)
            await node.run_all(calls)
            assert alone == [calls[0]]
            await node.run_all(calls)
            assert alone == [calls[0]]
        finally:
            await client.aclose()

    asyncio.run(main())
