"""Drive :mod:`~redlease.core.flows` with a blocking client (Redis or RedisCluster)."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any

import redis.exceptions as rex
from redis.exceptions import RedisClusterException

from redlease.core import _log as log
from redlease.core import client as _redis
from redlease.core import driving, gate, idle, redispy, topology, waiting, wire
from redlease.core.listen import _sync as listen
from redlease.core.primitives import give_up_together
from redlease.core.requests import Call, Flow, Replicate, Request, Wait, bounded, resume
from redlease.core.timing import GIVE_UP_WAIT, Budget
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
        except (rex.RedisError, RedisClusterException) as exc:
            raise self.error(exc) from exc

    def _execute(self, req: Request) -> Any:
        if isinstance(req, Call):
            return self._call(req)
        if isinstance(req, Wait):
            return listen.wait(self, req)
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
        return driving.checked(self._exchange(pool, args, timeout=req.timeout))

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
        if not req.keys:
            return self._routed(req)
        # when the request stops waiting, for a cluster's slot-map read (no call: per request)
        end = time.monotonic() + req.timeout if self.cluster and req.timeout is not None else None
        pool = self._pool(req.keys[0])
        if pool is None:
            pool = self._uncovered(req.keys[0], end)
        try:
            reply = self._script(pool, req)
        except rex.RedisError as exc:
            reply = exc
        if not isinstance(reply, rex.RedisError):
            return reply
        return self._follow(driving.rerouted(self, req, pool, reply, end), req)

    def _follow(self, steps: driving.Steps, req: Call) -> Any:
        """Carry out the shared ``steps`` for ``req`` (:mod:`redlease.core.driving`)."""
        try:
            step = next(steps)
            while True:
                step = steps.send(self._hop(step, req))
        except StopIteration as stop:
            return stop.value

    def _hop(self, step: driving.Step, req: Call) -> Any:
        """Perform one step of :func:`~redlease.core.driving.rerouted` for ``req``."""
        if isinstance(step, driving.Send):
            try:
                return self._script(step.home, req)
            except rex.RedisError as exc:
                return exc
        if isinstance(step, driving.Refresh):
            return self._refresh(step.home, step.error, step.end)
        if isinstance(step, driving.Locate):
            return self._pool(step.key)
        return self._routed(req)

    def _script(self, pool: Any, req: Call) -> Any:
        """``req``'s reply from ``pool``'s node (an error reply returned, not raised)."""
        run = _redis.scripting(pool)
        sent = run.command(req)
        reply = self._exchange(pool, sent, req.owner, req.timeout)
        while recovery := run.recover(req, sent, reply):  # an error, or a library check
            for sent in recovery:
                reply = self._exchange(pool, sent, req.owner, req.timeout)
        return reply

    def _uncovered(self, key: str, end: float | None) -> Any:
        """The pool of ``key``'s node once the cluster's slot map, which did not cover its slot,
        was read again (waiting for it until ``end`` at most); else an outage, nothing sent
        (redis-py's own routing would retry with its own timeouts)."""
        manager = self.client.nodes_manager
        topology.refresh(self.client, manager.initialize, _redis.left(end))
        pool = self._pool(key)
        if pool is None:
            raise driving.not_covered(key)
        return pool

    def _refresh(self, pool: Any, error: BaseException, end: float | None) -> bool:
        """Re-read the slot map (shared by every lock on this client) after ``error`` on
        ``pool``'s node, waiting for it until ``end`` at most (None: until it is read; see
        :mod:`redlease.core.topology`); a node that dropped us keeps no idle connection. True
        if the map was read again by then (no node answering counts: the request's own error
        is reported, the next one tries again)."""
        if isinstance(error, rex.ConnectionError):
            idle.drop(pool)
            pool.disconnect(inuse_connections=False)
        return topology.refresh(self.client, driving.map_read(self.client, pool), _redis.left(end))

    def _exchange(
        self, pool: Any, args: tuple[Any, ...], owner: str = "", timeout: float | None = None
    ) -> Any:
        """Send ``args`` (behind ``owner``'s unanswered requests) and read its reply (an error
        reply is returned); wait at most ``timeout`` (None: the client's socket timeout) for
        each reply, a new connection's connect and handshake included (in one attempt)."""
        pinned = self.pins.take(owner, pool) if owner else None
        wait = self.socket_timeout if timeout is None else timeout
        slot = None if pinned else gate.enter(pool, wait)
        try:
            try:
                conn = pinned.conn if pinned else idle.take(pool, timeout)
            except rex.RedisError as exc:
                raise _redis.unsent(exc)  # noqa: B904 - the cause is kept by unsent()
            unread = pinned.unread if pinned else 0
            reply: Any = None
            try:
                conn.send_packed_command(wire.pack(conn, args), check_health=False)
                unread += 1
                while unread:
                    try:
                        reply = redispy.read_within(conn, timeout)
                    except rex.ResponseError as exc:
                        reply = exc
                    unread -= 1
            except BaseException as exc:
                self._close(driving.to_close(self, owner, pool, conn, unread, exc))
                raise
            idle.give(pool, conn)
            return reply
        finally:
            if slot is not None:
                slot.release()

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

    def read(self, key: str, *args: Any) -> Any:
        """One plain command on the node of ``key`` (``args`` includes it); raises an error
        reply. None when the cluster's slot map is not ready."""
        pool = self._pool(key)
        if pool is None:
            return None
        return driving.checked(self._exchange(pool, args))

    # -- what a listener of this node's waiters uses (a quorum executor has its own) --------------

    def listen_key(self, req: Wait) -> Hashable:
        """The key of the listener ``req`` waits with among its client's
        (:func:`redlease.core.listen._sync.wait`)."""
        return req.keys

    def give_up(self, waits: list[Wait]) -> waiting.LeaseOwner | None:
        """Who holds the lease of ``waits`` (waiters due together) now, read by one GIVE_UP that
        takes them off the queue when another owner holds it."""
        return waiting.owner_of(self.execute(give_up_together(waits, GIVE_UP_WAIT)))

    def blpop(self, keys: tuple[str, ...], timeout: float) -> Any:
        """BLPOP for ``timeout`` seconds: [key, value], or None if nothing arrived in time.

        Redis checks blocking timeouts only at its ``hz`` tick (100 ms by default), so the
        reply is awaited a second longer; if none came by then the connection is dropped,
        which unblocks the server side too. Only the listener of a lock's waiters calls this:
        its waiters keep their own, exact, deadlines.
        """
        pool = self._pool(keys[0])
        if pool is None:
            return None  # the cluster's slot map is not ready: the next attempt re-routes
        try:
            conn = idle.take(pool, timeout + driving.BLPOP_GRACE)
        except rex.RedisError as exc:
            if self.cluster and _redis.stale_map(exc):
                self._refresh(pool, exc, time.monotonic() + timeout + driving.BLPOP_GRACE)
            raise
        try:
            conn.send_command(*driving.blpop(keys, timeout))
            if conn.can_read(timeout=timeout + driving.BLPOP_GRACE):
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


def drive(
    node: _redis.Executor,
    flow: Flow,
    answered: list[bool] | None = None,
    budget: Budget | None = None,
) -> Any:
    """Run ``flow`` to completion, executing each request it yields on ``node``; a request's
    error (a :class:`LockError`) is thrown into the flow, which may handle it; ``answered``
    gets an entry once Redis answered a request of it. ``budget`` bounds every request's wait
    (:func:`~redlease.core.requests.bounded`)."""
    req, result = resume(flow)
    while req is not None:
        try:
            reply = node.execute(bounded(req, budget, time.monotonic(), node.socket_timeout))
        except LockError as exc:
            req, result = resume(flow, error=exc)
        else:
            if answered is not None and not answered:
                answered.append(True)
            req, result = resume(flow, reply)
    return result


def guarded(
    node: _redis.Executor,
    flow: Flow,
    cleanup: Callable[[], Flow],
    budget: Budget | None = None,
    undo_budget: Callable[[], Budget] | None = None,
) -> Any:
    """Run ``flow`` within ``budget``; if it fails or is interrupted, run ``cleanup()`` (within
    ``undo_budget()``) before re-raising."""
    answered: list[bool] = []
    try:
        return drive(node, flow, answered, budget)
    except BaseException:
        try:
            drive(node, cleanup(), budget=None if undo_budget is None else undo_budget())
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.cleanup_failed(node.lock, node.name, exc, reached=bool(answered))
        raise
