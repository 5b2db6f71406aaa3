"""What redlease needs to know about a redis-py client: its name for errors, error mapping, and
which connections still have requests in flight.

This is the one place where redis-py exceptions become redlease exceptions.
"""

from __future__ import annotations

import inspect
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio.sentinel as aio_sentinel
import redis.exceptions as rex
import redis.sentinel as sentinel

from redlease.core import homes
from redlease.core.requests import Request
from redlease.core.scripting import Scripting
from redlease.core.timing import MIN_WAIT
from redlease.errors import ConnectionLimit, LockError, LockUnavailable, ProtocolError

PIN_HOLD = 30.0  # a pinned connection nobody came back for is closed after this many seconds
HOPS = 3  # nodes one cluster request is sent to at most (each after a refreshed slot map)


class Executor(Protocol):
    """What a lock handle runs its flows on: one node, a cluster, or a quorum of nodes."""

    name: str
    lock: str
    socket_timeout: float | None

    def execute(self, req: Request) -> Any:
        """The reply to ``req`` (asyncio executors return an awaitable of it)."""


class NodeBase:
    """What the sync and asyncio node drivers share: the client, its name, error mapping, and
    the connections pinned by unanswered requests (see :class:`Pins`)."""

    def __init__(self, client: Any, lock: str) -> None:
        self.client = client
        self.lock = lock
        self.name = describe(client)
        self.socket_timeout = socket_timeout(client)
        self.cluster = not hasattr(client, "connection_pool")
        self.pins = Pins()

    def error(self, exc: BaseException, home: Any = None) -> BaseException:
        """The redlease exception to raise for a redis-py error on this node (``home``: the
        pool or cluster node it happened on, named instead of the whole cluster)."""
        pool = getattr(self.client, "connection_pool", None) if home is None else home
        limit = getattr(pool, "max_connections", None)
        mapped = translate(
            exc, self.lock, self.name if home is None else home_name(home), limit=limit
        )
        return exc if mapped is None else mapped


def scripting(home: Any) -> Scripting:
    """How the server behind ``home`` (a connection pool or cluster node) runs scripts; shared
    by every lock on it, so only the first call learns whether it has Functions.

    Kept with ``home`` (:func:`redlease.core.homes.state`), so it lives and dies with it: a
    pool or node made later at a freed one's address must not inherit a verdict about another
    server's library (that let FCALL run an unverified library,
    tests/core/test_function_trust.py).
    """
    kept = homes.state(home)
    found = kept.get("_redlease_scripting")
    if not isinstance(found, Scripting):
        found = kept.setdefault("_redlease_scripting", Scripting())
    return found


@dataclass(slots=True)
class Pinned:
    """A connection whose last ``unread`` replies were not read yet; ``home`` takes it back."""

    home: Any
    conn: Any
    unread: int
    since: float


class Pins:
    """Connections kept aside because a request on them got no reply (timeout, cancellation,
    interrupt), by owner token and connection pool.

    The next request of the same owner to the same node is written behind the unanswered one on
    that connection. So an undo (release, leave) can never overtake the request it undoes: a
    paused node that resumes runs both, in order, even if the connection is closed meanwhile
    (the bytes are in its socket buffer). A new connection would give no such order. Once every
    reply is read the connection goes back to its pool; one nobody comes back for is closed
    after :data:`PIN_HOLD` (what was written still runs, in order).

    On a Redis Cluster a pin belongs to the node that served the slot. When the refreshed slot
    map names another node (a failover; a ``MOVED``), the undo goes to the new owner without
    waiting for the pinned request, and that cannot reverse their order: writes reach the new
    owner only through replication from the old one, which stopped before the promotion (a
    promoted replica has applied all it will ever get from its old master before it takes its
    first write), and whatever the old node runs later is discarded when it rejoins as a
    replica, or is refused with ``MOVED``. A request whose connection failed (the node died or
    dropped it) pins nothing: that node runs nothing more from it.
    """

    def __init__(self) -> None:
        self._pins: dict[tuple[str, int], Pinned] = {}
        self._lock = threading.Lock()

    def take(self, owner: str, home: Any) -> Pinned | None:
        """The pinned connection of ``owner`` at ``home`` (now the caller's), if any."""
        if not self._pins:  # the common case: nothing pinned
            return None
        with self._lock:
            return self._pins.pop((owner, id(home)), None)

    def keep(self, owner: str, home: Any, conn: Any, unread: int) -> list[Pinned]:
        """Pin ``conn``; returns the pins held too long, for the caller to close."""
        now = time.monotonic()
        with self._lock:
            old = self._pins.pop((owner, id(home)), None)
            self._pins[(owner, id(home))] = Pinned(home, conn, unread, now)
            stale = [k for k, p in self._pins.items() if now - p.since > PIN_HOLD]
            expired = [self._pins.pop(k) for k in stale]
        return [old, *expired] if old is not None else expired


class Unsent(rex.ConnectionError):
    """No connection could be had for a request (refused, unreachable): no byte of it was
    written, so it may go to another node."""


def stale_map(error: BaseException) -> bool:
    """Whether ``error`` (raised, or an error reply) from a cluster node means the client's slot
    map may be out of date, as redis-py reads it: the node is gone or silent (connection error,
    timeout), it moved the slot (``MOVED``) or the cluster is reconfiguring (``CLUSTERDOWN``).
    A client-side limit or refused credentials say nothing about the map."""
    if isinstance(error, rex.AuthenticationError | rex.MaxConnectionsError):
        return False
    return isinstance(
        error, rex.ConnectionError | rex.TimeoutError | rex.MovedError | rex.ClusterDownError
    )


def resendable(error: BaseException) -> bool:
    """Whether a request that failed with ``error`` certainly did not run, so it may be sent at
    once to the node that serves its slot after a refresh: no byte of it was written
    (:class:`Unsent`), or the node answered ``MOVED``. A request that may have run is reported
    (an outage the flow handles) and never sent twice."""
    return isinstance(error, Unsent | rex.MovedError)


def unsent(exc: BaseException) -> BaseException:
    """``exc``, raised while connecting for a request, as :class:`Unsent` (a client-side limit
    or refused credentials stay what they are)."""
    if not stale_map(exc) or isinstance(exc, Unsent):
        return exc
    out = Unsent(str(exc))
    out.__cause__ = exc
    return out


def refresh_options(manager: Any, failed: str | None) -> dict[str, Any]:
    """Keyword arguments of ``manager.initialize`` (a redis-py cluster ``NodesManager``) for a
    refresh after node ``failed`` failed: asked last where redis-py supports it (>= 7)."""
    try:
        params = inspect.signature(manager.initialize).parameters
    except (TypeError, ValueError):
        return {}
    return {"last_failed_node_name": failed} if failed and "last_failed_node_name" in params else {}


def keeps_order(owner: str, unread: int, exc: BaseException) -> bool:
    """Whether a connection that failed with ``exc`` must be pinned for ``owner`` (a request's
    owner token): it has requests without replies and is still open (a closed one was dropped
    by the server, which then runs nothing more from it)."""
    return bool(owner) and unread > 0 and not isinstance(exc, rex.ConnectionError)


def left(end: float | None) -> float | None:
    """The time left until ``end`` (a monotonic time); None: no end. Once it passed, still
    :data:`~redlease.core.timing.MIN_WAIT` (a socket given no time at all would not block)."""
    return None if end is None else max(MIN_WAIT, end - time.monotonic())


def describe(client: Any) -> str:
    """A short, secret-free name for the node(s) behind ``client`` (``host:port`` or a path)."""
    nodes = getattr(client, "get_nodes", None)
    if callable(nodes) and not hasattr(client, "connection_pool"):
        try:
            names = sorted(f"{n.host}:{n.port}" for n in nodes())
        except Exception:  # noqa: BLE001 - a name for an error message must never fail
            names = []
        return "cluster " + ",".join(names) if names else "cluster"
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return type(client).__name__
    return home_name(pool)


def home_name(home: Any) -> str:
    """``host:port`` (or ``unix:path``) of a connection pool or a cluster node; for a Sentinel
    master's pool, the service and the Sentinels asked (its own kwargs name no host)."""
    name = getattr(home, "name", None)  # redis.asyncio.cluster.ClusterNode
    if isinstance(name, str):
        return name
    service = getattr(home, "service_name", None)
    if isinstance(service, str):
        try:
            sentinels = home.sentinel_manager.sentinels
            hosts = ",".join(_address(s.connection_pool.connection_kwargs) for s in sentinels)
        except AttributeError:
            hosts = "?"
        return f"sentinel:{service} via {hosts}"
    return _address(getattr(home, "connection_kwargs", {}))


def _address(kwargs: dict[str, Any]) -> str:
    if kwargs.get("path"):
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def socket_timeout(client: Any) -> float | None:
    """The client's socket timeout, which bounds how long one BLPOP may block (a cluster
    client's: its nodes', from its connection arguments)."""
    try:
        value = client.connection_pool.connection_kwargs.get("socket_timeout")
    except AttributeError:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", None)
        kwargs = getattr(client, "connection_kwargs", kwargs)
        value = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
        value = value or getattr(client, "socket_timeout", None)
    return float(value) if value else None


class MasterRefused(rex.RedisError):
    """A Sentinel named a master the credentials' owner does not consent to. Not a
    connection error: redis-py does not retry it, and nothing is sent to that master."""


def translate(
    exc: BaseException, lock: str, node: str, limit: int | None = None
) -> LockError | None:
    """Map a redis-py exception to the redlease tree (``None``: not a Redis error).
    ``limit``: the ``max_connections`` of the pool it happened in, for the message."""
    if isinstance(exc, LockError):
        return exc
    if isinstance(exc, rex.MaxConnectionsError) or str(exc) == "No connection available.":
        # a limit of this client (its pool), never an outage
        size = f"max_connections={limit}" if isinstance(limit, int) else "max_connections"
        return ConnectionLimit(
            lock,
            f"client-side limit: {_short(exc)} (this client's pool: {size}); raise "
            "max_connections or use fewer clients per process",
            nodes=[node],
        )
    if isinstance(exc, rex.AuthenticationError | rex.AuthenticationWrongNumberOfArgsError):
        return LockUnavailable(
            lock, "authentication failed (check user and password)", nodes=[node]
        )
    if isinstance(exc, rex.NoPermissionError):
        return LockUnavailable(lock, f"permission denied by ACL: {exc}", nodes=[node])
    if isinstance(exc, MasterRefused):
        return LockUnavailable(lock, str(exc), nodes=[node])
    if isinstance(exc, rex.TimeoutError):
        return LockUnavailable(lock, "Redis did not answer in time", nodes=[node])
    if isinstance(exc, sentinel.MasterNotFoundError | aio_sentinel.MasterNotFoundError):
        # its text goes on with the reprs of the Sentinel clients
        master = str(exc).partition(" : ")[0]
        return LockUnavailable(lock, f"no master from the Sentinels: {master}", nodes=[node])
    if isinstance(exc, rex.ConnectionError):
        return LockUnavailable(lock, f"cannot reach Redis: {_short(exc)}", nodes=[node])
    if isinstance(exc, rex.ReadOnlyError):
        return LockUnavailable(lock, "node is a read-only replica", nodes=[node])
    if isinstance(
        exc, rex.ClusterError | rex.TryAgainError | rex.AskError | rex.RedisClusterException
    ):  # a slot being moved, a node failing over, no node reachable: all pass
        return LockUnavailable(lock, f"cluster unavailable: {_short(exc)}", nodes=[node])
    if isinstance(exc, rex.ResponseError):
        text = _short(exc)
        if text.startswith("WRONGTYPE") or "WRONGTYPE" in text:
            return ProtocolError(
                lock, "a lock key holds a value of another type (name clash?)", nodes=[node]
            )
        if "BUSY" in text or "LOADING" in text or "MASTERDOWN" in text:
            return LockUnavailable(lock, f"node busy: {text}", nodes=[node])
        return ProtocolError(lock, f"Redis error: {text}", nodes=[node])
    if isinstance(exc, rex.RedisError):
        return LockUnavailable(lock, f"Redis error: {_short(exc)}", nodes=[node])
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
