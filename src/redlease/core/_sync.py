"""Drive :mod:`~redlease.core.protocol` flows with a blocking client (Redis or RedisCluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.exceptions as rex

from redlease.core import _log as log
from redlease.core import client as _redis
from redlease.core.protocol import Call, Flow, Replicate, Request, Wait


class SyncNode(_redis.NodeBase):
    """One blocking Redis client (a single server or a whole cluster) as seen by one lock."""

    def execute(self, req: Request) -> Any:
        try:
            return self._execute(req)
        except rex.RedisError as exc:
            raise self.error(exc) from exc

    def _execute(self, req: Request) -> Any:
        if isinstance(req, Call):
            n = len(req.keys)
            try:
                return self.client.evalsha(req.script.sha, n, *req.keys, *req.args)
            except rex.NoScriptError:
                return self.client.eval(req.script.lua, n, *req.keys, *req.args)
        if isinstance(req, Wait):
            return self._blpop(req.key, req.timeout)
        if isinstance(req, Replicate):
            if self.cluster:
                node = self.client.get_node_from_key(req.key)
                return self.client.execute_command(
                    "WAIT", req.replicas, req.timeout_ms, target_nodes=node
                )
            return self.client.execute_command("WAIT", req.replicas, req.timeout_ms)
        raise TypeError(f"unknown request {req!r}")

    def _blpop(self, key: str, timeout: float) -> bool:
        """BLPOP with a client-side deadline.

        Redis checks blocking timeouts only at its ``hz`` tick (100 ms by default), so the server
        timeout is a safety net and the precise deadline is kept here: if nothing arrived in
        time the connection is dropped, which unblocks the server side too.
        """
        if self.cluster:
            node = self.client.get_node_from_key(key)
            pool = self.client.get_redis_connection(node).connection_pool
        else:
            pool = self.client.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command("BLPOP", key, round(timeout + 1.0, 3))
            if conn.can_read(timeout=timeout):
                return conn.read_response() is not None
            conn.disconnect()
            return False
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)


def drive(node: SyncNode, flow: Flow) -> Any:
    """Run ``flow`` to completion, executing each request it yields on ``node``."""
    reply: Any = None
    while True:
        try:
            req = flow.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = node.execute(req)


def guarded(node: SyncNode, flow: Flow, cleanup: Callable[[], Flow]) -> Any:
    """Run ``flow``; if it fails or is interrupted, run ``cleanup()`` before re-raising."""
    try:
        return drive(node, flow)
    except BaseException:
        try:
            drive(node, cleanup())
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.warning("cleanup failed", lock=node.lock, node=node.name, error=str(exc))
        raise
