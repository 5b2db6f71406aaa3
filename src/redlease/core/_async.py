"""Drive :mod:`~redlease.core.flows` with an asyncio client (Redis or RedisCluster)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import redis.exceptions as rex
from redis.exceptions import RedisClusterException

from redlease.core import _log as log
from redlease.core import client as _redis
from redlease.core import driving, gate, idle, lent, redispy, topology, waiting, watch, wire
from redlease.core.listen import _async as listen
from redlease.core.primitives import give_up_together
from redlease.core.requests import Call, Flow, Replicate, Request, Wait, bounded, resume
from redlease.core.timing import GIVE_UP_WAIT, REPLY_GRACE, Budget
from redlease.errors import LockError

T = TypeVar("T")


class AsyncNode(_redis.NodeBase):
    """One asyncio Redis client (a single server or a whole cluster) as seen by one lock.

    Like :class:`redlease.core._sync.SyncNode`: no silent retry, and a request cut short
    (timeout, cancellation) pins its connection so that its owner's undo is written behind it.
    Requests are written synchronously, so a cancellation never leaves half a request behind.
    """

    async def execute(self, req: Request) -> Any:
        try:
            return await self._execute(req)
        except (rex.RedisError, RedisClusterException) as exc:
            raise self.error(exc) from exc

    async def _execute(self, req: Request) -> Any:
        if isinstance(req, Call):
            return await self._call(req)
        if isinstance(req, Wait):
            return await listen.wait(self, req)
        if isinstance(req, Replicate):
            return await self._wait_replicas(req)
        raise TypeError(f"unknown request {req!r}")

    async def _wait_replicas(self, req: Replicate) -> Any:
        """``WAIT`` on the connection the write went out on (see the blocking driver's)."""
        args = ("WAIT", req.replicas, req.timeout_ms)
        home = await self._home(req.key, req.timeout)
        if home is None:  # the cluster's slot map is not ready: through the client's routing
            node = self.client.get_node_from_key(req.key)
            return await self.client.execute_command(*args, target_nodes=node)
        return driving.checked(await self._exchange(home, args, timeout=req.timeout))

    async def _home(self, key: str, wait: float | None = None) -> Any:
        """The pool (or cluster node) serving ``key``; None: let the cluster client route.

        A cluster client learns its slot map first (once, and again when redis-py's own
        commands found it stale): before it, redis-py's own routing sends a keyed command to a
        default node, and its fifth MOVED reply makes it close every connection of every node,
        those other requests of this process are reading from included ("Connection closed by
        server"). The map is read beside the request (:mod:`redlease.core.topology`), awaited
        ``wait`` seconds at most (None: until read): a client that has no node for ``key`` by
        then sends nothing (no answer in time)."""
        if not self.cluster:
            return self.client.connection_pool
        read = True
        if getattr(self.client, redispy.MAP_DUE, True):  # a map read is due
            read = await topology.arefresh(self.client, self.client.initialize, wait)
        try:
            return self.client.get_node_from_key(key)
        except RedisClusterException:  # slot not covered (yet): the client refreshes its map
            if not read:
                raise redispy.no_reply(wait or 0.0) from None
            return None

    async def _call(self, req: Call) -> Any:
        if not req.keys:
            return await self._routed(req)
        # when the request stops waiting, for a cluster's slot-map read (no call: per request)
        end = time.monotonic() + req.timeout if self.cluster and req.timeout is not None else None
        home = await self._home(req.keys[0], req.timeout)
        if home is None:
            home = await self._uncovered(req.keys[0], end)
        try:
            reply = await self._script(home, req)
        except rex.RedisError as exc:
            reply = exc
        if not isinstance(reply, rex.RedisError):
            return reply
        return await self._follow(driving.rerouted(self, req, home, reply, end), req)

    async def _follow(self, steps: driving.Steps, req: Call) -> Any:
        """Carry out the shared ``steps`` for ``req`` (:mod:`redlease.core.driving`)."""
        try:
            step = next(steps)
            while True:
                step = steps.send(await self._hop(step, req))
        except StopIteration as stop:
            return stop.value

    async def _hop(self, step: driving.Step, req: Call) -> Any:
        """Perform one step of :func:`~redlease.core.driving.rerouted` for ``req``."""
        if isinstance(step, driving.Send):
            try:
                return await self._script(step.home, req)
            except rex.RedisError as exc:
                return exc
        if isinstance(step, driving.Refresh):
            return await self._refresh(step.home, step.error, step.end)
        if isinstance(step, driving.Locate):
            return await self._home(step.key, _redis.left(step.end))
        return await self._routed(req)

    async def _script(self, home: Any, req: Call) -> Any:
        """``req``'s reply from ``home`` (an error reply returned, not raised)."""
        run = _redis.scripting(home)
        sent = run.command(req)
        reply = await self._exchange(home, sent, req.owner, req.timeout)
        while recovery := run.recover(req, sent, reply):  # an error, or a library check
            for sent in recovery:
                reply = await self._exchange(home, sent, req.owner, req.timeout)
        return reply

    async def _uncovered(self, key: str, end: float | None) -> Any:
        """The node of ``key`` once the slot map, which did not cover its slot, was read again
        (see the blocking driver's); else an outage, nothing sent."""
        client = self.client
        # a client whose first read failed reads through initialize() (its own back-off)
        read = client.initialize if getattr(client, redispy.MAP_DUE, True) else None
        read = read or client.nodes_manager.initialize
        await topology.arefresh(client, read, _redis.left(end))
        try:
            return client.get_node_from_key(key)
        except RedisClusterException:
            raise driving.not_covered(key) from None

    async def _refresh(self, home: Any, error: BaseException, end: float | None) -> bool:
        """Re-read the slot map after ``error`` on cluster node ``home``, waiting for it until
        ``end`` at most (see the blocking driver's); a node that dropped us keeps no idle
        connection (redis-py >= 7 can close them). True if the map was read again by then."""
        drop = getattr(home, "disconnect_free_connections", None)
        if isinstance(error, rex.ConnectionError) and drop is not None:
            await drop()
        read = driving.map_read(self.client, home)
        return await topology.arefresh(self.client, read, _redis.left(end))

    async def _exchange(
        self, home: Any, args: tuple[Any, ...], owner: str = "", timeout: float | None = None
    ) -> Any:
        """Send ``args`` (behind ``owner``'s unanswered requests) and read its reply (an error
        reply is returned); wait at most ``timeout`` (None: the client's socket timeout) for
        each reply, and for a connection (connect, handshake and redis-py's retries)."""
        pinned = self.pins.take(owner, home) if owner else None
        slot = None
        if pinned is None:
            slot = gate.aenter_now(home)
            if slot is None:
                slot = await gate.aenter(home, self.socket_timeout if timeout is None else timeout)
        try:
            try:
                conn = pinned.conn if pinned else idle.aready(home)
                if conn is None:
                    conn = await _checkout(home, timeout)
            except rex.RedisError as exc:
                raise _redis.unsent(exc)  # noqa: B904 - the cause is kept by unsent()
            unread = pinned.unread if pinned else 0
            reply: Any = None
            try:
                writer = getattr(conn, redispy.WRITER, None)
                if writer is None or writer.transport.is_closing():
                    raise rex.ConnectionError(f"connection to {self.name} lost")
                writer.writelines(wire.pack(conn, args))
                unread += 1
                limit = conn.socket_timeout if timeout is None else timeout
                while unread:
                    if limit is None:
                        reply = await redispy.aread(conn)
                    else:
                        bound = watch.bound_task(limit)  # asyncio.timeout's cost, without a timer
                        try:
                            reply = await redispy.aread(conn)
                        except asyncio.CancelledError:
                            if watch.timed_out(bound):
                                raise redispy.no_reply(limit) from None
                            raise
                        finally:
                            bound.close()
                    unread -= 1
            except BaseException as exc:
                await _close(driving.to_close(self, owner, home, conn, unread, exc))
                raise
            await _give(home, conn)
            return reply
        finally:
            if slot is not None:
                slot.release()

    async def blpop(self, keys: tuple[str, ...], timeout: float) -> Any:
        """BLPOP for ``timeout`` seconds on a connection of the pool (a kept one first, as
        requests take): [key, value], or None if nothing arrived. The reply is awaited a second
        longer (Redis checks blocking timeouts at its ``hz`` tick); then, or when cancelled, the
        connection is dropped. Only the listener of a lock's waiters calls this."""
        wait = timeout + driving.BLPOP_GRACE
        home = await self._home(keys[0], wait)
        if home is None:
            return None  # the cluster's slot map is not ready: the next attempt re-routes
        conn = await _checkout(home, wait)
        reply: Any = None
        dropped = False
        try:
            writer = getattr(conn, redispy.WRITER, None)
            if writer is None or writer.transport.is_closing():
                raise rex.ConnectionError(f"connection to {self.name} lost")
            writer.writelines(wire.pack(conn, driving.blpop(keys, timeout)))
            try:
                async with asyncio.timeout(wait):
                    reply = await redispy.aread(conn)
            except TimeoutError:
                dropped = True
        except BaseException:
            await _close([_redis.Pinned(home, conn, 1, 0.0)])
            raise
        if dropped:  # no reply in time: the connection goes, and the server's BLPOP with it
            await _close([_redis.Pinned(home, conn, 1, 0.0)])
            return None
        await _give(home, conn)
        return driving.checked(reply)

    async def read(self, key: str, *args: Any, timeout: float | None = None) -> Any:
        """One plain command on the node of ``key`` (``args`` includes it), its reply (and a
        connection, and the cluster's slot map) awaited at most ``timeout`` seconds (None: the
        client's socket timeout); raises an error reply. None when the cluster's slot map is
        not ready."""
        home = await self._home(key, timeout)
        if home is None:
            return None
        return driving.checked(await self._exchange(home, args, timeout=timeout))

    # -- what a listener of this node's waiters uses (a quorum executor has its own) --------------

    def listen_key(self, req: Wait) -> Hashable:
        """The key of the listener ``req`` waits with among its client's
        (:func:`redlease.core.listen._async.wait`)."""
        return req.keys

    async def give_up(self, waits: list[Wait]) -> waiting.LeaseOwner | None:
        """Who holds the lease of ``waits`` (waiters due together) now, read by one GIVE_UP that
        takes them off the queue when another owner holds it."""
        return waiting.owner_of(await self.execute(give_up_together(waits, GIVE_UP_WAIT)))

    async def _routed(self, req: Call) -> Any:
        """Through the client's own routing (a cluster whose slot map changed)."""
        try:
            return await self.client.execute_command(*req.evalsha())
        except rex.NoScriptError:
            return await self.client.execute_command(*req.eval())


async def _checkout(home: Any, timeout: float | None = None) -> Any:
    """A connected connection from a pool (``get_connection``) or a cluster node, within
    ``timeout`` (None: unbounded): redis-py connects with the client's retries (redis-py 8: 10,
    with back-off) and socket timeouts, which must not multiply an operation's deadline."""
    if timeout is None:
        return await _connected(home, None)
    try:
        async with asyncio.timeout(timeout):
            return await _connected(home, timeout)
    except TimeoutError:
        raise redispy.no_reply(timeout) from None


async def _connected(home: Any, timeout: float | None) -> Any:
    if hasattr(home, "get_connection"):
        return await idle.atake(home, timeout)
    conn = home.acquire_connection()
    lent.lend(home, conn)
    try:
        if conn.is_connected and not await idle.aclean(conn):
            await conn.disconnect()  # its node went away since: connect again (or fail unsent)
        if not conn.is_connected:
            await conn.connect()
    except BaseException:
        await _give_back(home, conn)
        raise
    return conn


async def _give(home: Any, conn: Any) -> None:
    """Return ``conn`` after a request answered in full: kept for the next one if from a pool
    (see :mod:`redlease.core.idle`)."""
    if hasattr(home, "get_connection"):
        await idle.agive(home, conn)
    else:
        await _give_back(home, conn)


async def _give_back(home: Any, conn: Any) -> None:
    """Return ``conn`` to its pool (async ``release``) or cluster node (sync ``release``)."""
    if hasattr(home, "get_connection"):
        await idle.arelease(home, conn)
        return
    await lent.take_back(home, conn)
    released = home.release(conn)
    if inspect.isawaitable(released):
        await released


async def _close(pins: list[_redis.Pinned]) -> None:
    for p in pins:
        try:
            await p.conn.disconnect()
        finally:
            await _give_back(p.home, p.conn)


async def drive(
    node: _redis.Executor,
    flow: Flow,
    answered: list[bool] | None = None,
    first: Request | None = None,
    budget: Budget | None = None,
) -> Any:
    """Run ``flow`` to completion, executing each request it yields on ``node``; a request's
    error (a :class:`LockError`) is thrown into the flow, which may handle it; ``answered``
    gets an entry once Redis answered a request of it. ``first``: the request ``flow`` has
    yielded already. ``budget`` bounds every request's wait
    (:func:`~redlease.core.requests.bounded`)."""
    req, result = (first, None) if first is not None else resume(flow)
    while req is not None:
        try:
            reply = await node.execute(bounded(req, budget, time.monotonic(), node.socket_timeout))
        except LockError as exc:
            req, result = resume(flow, error=exc)
        else:
            if answered is not None and not answered:
                answered.append(True)
            req, result = resume(flow, reply)
    return result


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


async def guarded(
    node: _redis.Executor,
    flow: Flow,
    cleanup: Callable[[], Flow],
    budget: Budget | None = None,
    undo_budget: Callable[[], Budget] | None = None,
) -> Any:
    """Run ``flow`` within ``budget``; if it fails or is cancelled, run ``cleanup()``
    (shielded, within ``undo_budget()``) before re-raising."""
    answered: list[bool] = []
    try:
        return await drive(node, flow, answered, budget=budget)
    except BaseException:
        undo = cleanup()
        first, _ = resume(undo)
        if first is None:  # nothing to undo: no lease, no registration left
            raise
        limits = None if undo_budget is None else undo_budget()
        limit = 10.0 if limits is None or limits.deadline is None else limits.cap + REPLY_GRACE
        try:
            await run_to_completion(drive(node, undo, first=first, budget=limits), limit=limit)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - the original error matters more
            log.cleanup_failed(node.lock, node.name, exc, reached=bool(answered))
        raise
