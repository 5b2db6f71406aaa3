"""Drive :mod:`~redlease.core.protocol` flows with a blocking client (Redis or RedisCluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.exceptions as rex
from redis.exceptions import RedisClusterException

from redlease.core import _log as log
from redlease.core import client as _redis
from redlease.core import idle, wire
from redlease.core.protocol import Call, Flow, Replicate, Request, Wait, resume
from redlease.errors import LockError


class SyncNode(_redis.NodeBase):
    """One blocking Redis client (a single server or a whole cluster) as seen by one lock.

    Scripts run on a connection taken from the pool of the node that serves their keys, with no
    silent retry: a request that got no reply pins its connection for its owner (see
    :class:`~redlease.core.client.Pins`), so the undo that follows is written behind it.
    """

    def execute(self, req: Request) -> Any:
        try:
            return self._execute(req)
        except rex.RedisError as exc:
            raise self.error(exc) from exc

    def _execute(self, req: Request) -> Any:
        if isinstance(req, Call):
            return self._call(req)
        if isinstance(req, Wait):
            return req.reply(self._blpop(req.keys, req.timeout))
        if isinstance(req, Replicate):
            return self._wait_replicas(req)
        raise TypeError(f"unknown request {req!r}")

    def _wait_replicas(self, req: Replicate) -> Any:
        """``WAIT`` on the connection the write went out on: WAIT counts the replicas that have
        this connection's last write. It was kept last (:mod:`redlease.core.idle`), so it is
        the one taken first."""
        args = ("WAIT", req.replicas, req.timeout_ms)
        pool = self._pool(req.key)
        if pool is None:  # the cluster's slot map is not ready: through the client's routing
            node = self.client.get_node_from_key(req.key)
            return self.client.execute_command(*args, target_nodes=node)
        reply = self._exchange(pool, args)
        if isinstance(reply, rex.ResponseError):
            raise reply
        return reply

    def _pool(self, key: str) -> Any:
        """The connection pool of the node serving ``key`` (None: let the cluster client route)."""
        if not self.cluster:
            return self.client.connection_pool
        try:
            node = self.client.get_node_from_key(key)
            return self.client.get_redis_connection(node).connection_pool
        except RedisClusterException:  # slot not covered (yet): the client refreshes its map
            return None

    def _call(self, req: Call) -> Any:
        pool = self._pool(req.keys[0]) if req.keys else None
        if pool is None:
            return self._routed(req)
        run = _redis.scripting(pool)
        try:
            sent = run.command(req)
            reply = self._exchange(pool, sent, req.owner, req.timeout)
            while isinstance(reply, rex.ResponseError):
                recovery = run.recover(req, sent, reply)
                if not recovery:
                    break
                for sent in recovery:
                    reply = self._exchange(pool, sent, req.owner, req.timeout)
        except rex.RedisError as exc:
            raise self.error(exc, pool if self.cluster else None) from exc
        if isinstance(reply, rex.MovedError | rex.AskError):  # resharded or failed over
            return self._routed(req)
        if isinstance(reply, rex.ResponseError):
            raise self.error(reply, pool if self.cluster else None) from reply
        return reply

    def _exchange(
        self, pool: Any, args: tuple[Any, ...], owner: str = "", timeout: float | None = None
    ) -> Any:
        """Send ``args`` (behind ``owner``'s unanswered requests) and read its reply (an error
        reply is returned); wait at most ``timeout`` (None: the client's socket timeout)."""
        pinned = self.pins.take(owner, pool) if owner else None
        conn = pinned.conn if pinned else idle.take(pool)
        unread = pinned.unread if pinned else 0
        reply: Any = None
        try:
            conn.send_packed_command(wire.pack(conn, args), check_health=False)
            unread += 1
            while unread:
                if timeout is not None and not conn.can_read(timeout=timeout):
                    raise _redis.no_reply(timeout)
                try:
                    reply = conn.read_response(disconnect_on_error=False)
                except rex.ResponseError as exc:
                    reply = exc
                unread -= 1
        except BaseException as exc:
            if _redis.keeps_order(owner, unread, exc):
                self._close(self.pins.keep(owner, pool, conn, unread))
            else:
                self._close([_redis.Pinned(pool, conn, unread, 0.0)])
            raise
        idle.give(pool, conn)
        return reply

    @staticmethod
    def _close(pins: list[_redis.Pinned]) -> None:
        for p in pins:
            p.conn.disconnect()
            p.home.release(p.conn)

    def _routed(self, req: Call) -> Any:
        """Through the client's own routing (a cluster whose slot map changed)."""
        try:
            return self.client.execute_command(*req.evalsha())
        except rex.NoScriptError:
            return self.client.execute_command(*req.eval())

    def _blpop(self, keys: tuple[str, ...], timeout: float) -> Any:
        """BLPOP with a client-side deadline: [key, value], or None if nothing arrived in time.

        Redis checks blocking timeouts only at its ``hz`` tick (100 ms by default), so the server
        timeout is a safety net and the precise deadline is kept here: if nothing arrived in
        time the connection is dropped, which unblocks the server side too.
        """
        pool = self._pool(keys[0])
        if pool is None:
            return None  # the cluster's slot map is not ready: the next attempt re-routes
        conn = idle.take(pool)
        try:
            conn.send_command("BLPOP", *keys, round(timeout + 1.0, 3))
            if conn.can_read(timeout=timeout):
                reply = conn.read_response()
                idle.give(pool, conn)
                return reply
            conn.disconnect()
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        pool.release(conn)
        return None


def drive(node: _redis.Executor, flow: Flow, answered: list[bool] | None = None) -> Any:
    """Run ``flow`` to completion, executing each request it yields on ``node``; a request's
    error (a :class:`LockError`) is thrown into the flow, which may handle it; ``answered``
    gets an entry once Redis answered a request of it."""
    req, result = resume(flow)
    while req is not None:
        try:
            reply = node.execute(req)
        except LockError as exc:
            req, result = resume(flow, error=exc)
        else:
            if answered is not None and not answered:
                answered.append(True)
            req, result = resume(flow, reply)
    return result


def guarded(node: _redis.Executor, flow: Flow, cleanup: Callable[[], Flow]) -> Any:
    """Run ``flow``; if it fails or is interrupted, run ``cleanup()`` before re-raising."""
    answered: list[bool] = []
    try:
        return drive(node, flow, answered)
    except BaseException:
        try:
            drive(node, cleanup())
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.cleanup_failed(node.lock, node.name, exc, reached=bool(answered))
        raise
