"""Bookkeeping shared by the sync and asyncio lock handles (pure: no I/O here).

A handle turns user calls into :mod:`redlease.core.flows` and their results into
:class:`~redlease.core.lease.Lease` objects. :mod:`~redlease.core.locks` and
:mod:`~redlease.core.aio` only add the thin "run this flow" layer on top.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from redlease.core import flows, primitives, waiting
from redlease.core.arguments import check_flavour, checked_keywords
from redlease.core.client import Executor
from redlease.core.clock import ServerTime
from redlease.core.flows import AcquireState, Grant
from redlease.core.keys import LockKeys, validate_identity
from redlease.core.lease import Lease
from redlease.core.primitives import Options, Primitive
from redlease.core.requests import Flow
from redlease.core.rules import check_limit
from redlease.core.state import read_state_flow
from redlease.core.timing import (
    DEFAULT_TTL,
    REPLY_GRACE,
    TTL_RANGE,
    Budget,
    cleanup_budget,
    operation_budget,
)
from redlease.errors import ConfigError, NotOwned

LOUD_RELEASES = 100
"""After a handle meets contention (a grant that waited, or waiters met by a release that
expected none), its next this many releases send RELEASE's full form at once: a contended lock
is not guessed quiet again until a run of releases has gone by (see
``HandleCore._begin_release``)."""


def default_identity() -> str:
    """Holder identity when none is given: ``$POD_NAME``, else ``hostname:pid``."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}:{os.getpid()}"


def make_options(
    *,
    ttl: float,
    identity: str | None,
    handoff: float,
    replicas: int,
    replica_timeout: float,
    forget_after: float | None = None,
) -> Options:
    """Validate user settings into :class:`Options` (each error names its argument)."""
    lo, hi = TTL_RANGE
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not lo <= ttl <= hi:
        raise ConfigError("ttl", f"must be between {lo:g} and {hi:g} seconds, got {ttl!r}")
    if not isinstance(handoff, int | float) or handoff < 0:
        raise ConfigError("handoff", f"must be >= 0 seconds, got {handoff!r}")
    replicas, replica_timeout = primitives.validate_replication(replicas, replica_timeout)
    ident = validate_identity(default_identity() if identity is None else identity)
    if forget_after is not None and (
        isinstance(forget_after, bool)
        or not isinstance(forget_after, int | float)
        or not 0 < forget_after < float("inf")
    ):
        raise ConfigError("forget_after", f"must be None or > 0 seconds, got {forget_after!r}")
    return Options(
        ttl=float(ttl),
        identity=ident,
        handoff=float(handoff),
        replicas=replicas,
        replica_timeout=replica_timeout,
        forget_after=None if forget_after is None else float(forget_after),
    )


def check_timeout(blocking: bool, timeout: float | None) -> None:
    if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
        raise ConfigError("timeout", f"must be None or >= 0 seconds, got {timeout!r}")
    if not blocking and timeout not in (None, 0):
        raise ConfigError("timeout", "cannot be set when blocking=False")


@dataclass
class Held:
    """One owner's hold on a lock: its owner token, local reentrancy count and lease.

    ``quiet``: granted at its first attempt and never renewed, so no waiter is expected at its
    release (see :meth:`HandleCore._begin_release`).
    """

    token: str
    lease: Lease
    count: int = 1
    quiet: bool = False


class HandleCore:
    """State and flow-building shared by one lock handle, sync or async.

    ``kind`` is ``mutex`` (one hold per handle), ``reentrant`` (one hold per owner object),
    ``read`` or ``write`` (a read-write lock's two sides; one hold per handle). The ``*_flow``
    methods say which flows (:mod:`~redlease.core.flows`) an operation runs; a multi-key lease
    (:class:`redlease.core.multi.MultiCore`) swaps them.
    """

    kind = "mutex"
    counting = False  # takes ``limit`` (a counting semaphore; see redlease.Semaphore)

    plain: Callable[[Any, str], Executor]  # the flavour's node driver (sync or asyncio)
    asyncio = False  # the flavour: which clients it takes (checked at construction)
    public = ""  # the public class named when a client of the other flavour is given ('': own)

    @checked_keywords
    def __init__(
        self,
        client: Any,
        name: Any,
        *,
        ttl: float = DEFAULT_TTL,
        identity: str | None = None,
        handoff: float = 0.25,
        replicas: int = 0,
        replica_timeout: float = primitives.DEFAULT_REPLICA_TIMEOUT,
        forget_after: float | None = None,
    ) -> None:
        """``client``: a Redis client of this API's flavour (blocking or asyncio), a Redis
        Cluster client or a :class:`redlease.quorum.NodeSet`; ``name``: the lock's name.

        ``ttl``: the lease's time to live in seconds (default 15, as the sidecar, the Elector
        and the CRD); ``identity``: the holder's name shown by ``status`` (default
        ``$POD_NAME``, else ``hostname:pid``); ``handoff``: how long a released lock stays
        reserved for a woken waiter; ``replicas``/``replica_timeout``: WAIT for that many
        replicas after each grant and extension (fail closed); ``forget_after``: let the fence
        counter expire that long after the lease (docs/safety.md). A wrong or unknown keyword
        raises :class:`~redlease.errors.ConfigError` naming it.
        """
        self._setup(
            client, name, 1, ttl, identity, handoff, replicas, replica_timeout, forget_after
        )

    def _setup(
        self,
        client: Any,
        name: Any,
        limit: int,
        ttl: float,
        identity: str | None,
        handoff: float,
        replicas: int,
        replica_timeout: float,
        forget_after: float | None,
    ) -> None:
        check_flavour(client, self.asyncio, self.public or type(self).__name__)
        options = make_options(
            ttl=ttl,
            identity=identity,
            handoff=handoff,
            replicas=replicas,
            replica_timeout=replica_timeout,
            forget_after=forget_after,
        )
        self.prim = self._primitive(name, options)
        if forget_after is not None and (self.prim.group or self.kind in ("read", "write")):
            raise ConfigError(
                "forget_after",
                "only Lock, ReentrantLock and Semaphore take it (one lock name, exclusive)",
            )
        limit = check_limit(limit)
        if limit > 1:
            if not self.counting or self.kind != "mutex" or self.prim.group:
                raise ConfigError(
                    "limit",
                    "only a Semaphore takes a limit (one lock name; not reentrant, read-write "
                    "or multi-key)",
                )
            self.prim = replace(self.prim, limit=limit)
        self.name = self.prim.name
        self._holds: dict[Any, Held] = {}
        self._loud = 0  # releases left that expect waiters (see _begin_release)
        self._watchdogs: dict[Any, Any] = {}  # owner -> the renewer of its ``with`` block
        self.one_clock = True  # one server's clock per lease (not a RedLock set)
        self._node = self._executor(client, self.plain)

    def _primitive(self, name: str, options: Options) -> Primitive:
        return Primitive(LockKeys.for_name(name), options, self.kind)

    def _executor(self, client: Any, plain: Callable[[Any, str], Executor]) -> Executor:
        """What this handle runs its flows on: a RedLock node set's quorum executor, or
        ``plain(client, name)`` (one node or a cluster)."""
        if getattr(client, "is_redlease_nodeset", False):  # redlease.core.quorum.NodeSet
            self.one_clock = False
            self.prim = self.prim.on_quorum()
            return client.node_for(self)  # type: ignore[no-any-return]
        # one node or a cluster slot: direct hand-off, to the mailbox of this process's waiters
        self.prim = self.prim.with_direct(waiting.mailbox(client))
        return plain(client, self.name)

    # -- properties ---------------------------------------------------------------------------

    @property
    def ttl(self) -> float:
        return self.prim.options.ttl

    @property
    def limit(self) -> int:
        """How many may hold the lock at once (1: a mutex)."""
        return self.prim.limit

    @property
    def identity(self) -> str:
        return self.prim.options.identity

    @property
    def keys(self) -> LockKeys:
        return self.prim.keys

    def _held(self, owner: Any = None) -> Held | None:
        return self._holds.get(self._owner_key(owner))

    def lease(self, owner: Any = None) -> Lease | None:
        """The current lease of ``owner`` (None if it holds nothing)."""
        held = self._held(owner)
        return held.lease if held else None

    def owned(self, owner: Any = None) -> bool:
        """True while ``owner`` (default: this handle; a reentrant lock's: the calling thread or
        task) holds the lock and its local deadline has not passed. Local: no round trip (see
        ``locked()`` for whether anyone holds it)."""
        held = self._held(owner)
        return held is not None and held.lease.valid

    def count(self, owner: Any = None) -> int:
        """How many times ``owner`` holds the lock (reentrant locks count re-entries)."""
        held = self._held(owner)
        return held.count if held else 0

    # -- which flows ----------------------------------------------------------------------------

    def _acquire_flow(
        self, token: str, blocking: bool, timeout: float | None, socket_timeout: float | None
    ) -> tuple[Flow, Callable[[], Flow]]:
        """The acquire flow and the clean-up that undoes it if it fails or is interrupted."""
        state = AcquireState()
        flow = flows.acquire(
            self.prim,
            token,
            blocking=blocking,
            timeout=timeout,
            state=state,
            socket_timeout=socket_timeout,
        )
        return flow, lambda: flows.abort_acquire(self.prim, token, state)

    def _release_flow(
        self, token: str, full: bool, quiet: Callable[[], object] | None = None
    ) -> Flow:
        return flows.release(self.prim, token, full=full, quiet=quiet)

    def _extend_flow(
        self, token: str, ttl: float | None, timeout: float | None, since: ServerTime | None = None
    ) -> Flow:
        return flows.extend(
            self.prim, token, ttl, clock=time.monotonic, timeout=timeout, since=since
        )

    def _state_flow(self) -> Flow:
        """Reads the lock's live state (a :class:`~redlease.core.state.LockState`)."""
        return read_state_flow(self.keys, self.prim.limit)

    # -- operations -----------------------------------------------------------------------------

    def _owner_key(self, owner: Any) -> Any:
        return None

    def _resolve_owner(self, owner: Any) -> Any:
        """The concrete owner for ``owner`` in the calling thread/task (for background renewers,
        which run elsewhere but must act for the caller)."""
        return self._owner_key(owner)

    def budget(self, timeout: float | None = None, held: Held | None = None) -> Budget:
        """How long an operation's I/O may take (see :class:`~redlease.core.timing.Budget`): a
        caller's ``timeout`` plus a grace, and each reply at most the TTL; on a ``held`` lease
        (extend, release) never long after its local deadline."""
        now = time.monotonic()
        until = None if held is None else max(held.lease.deadline, now) + REPLY_GRACE
        return operation_budget(self.prim.options.ttl, now, timeout, until)

    def cleanup_budget(self) -> Budget:
        """How long the undo after a failed or interrupted acquire may take."""
        return cleanup_budget(self.prim.options.ttl, time.monotonic())

    def _begin_acquire(
        self, owner: Any, blocking: bool, timeout: float | None, socket_timeout: float | None
    ) -> tuple[Flow, Callable[[], Flow], str]:
        check_timeout(blocking, timeout)
        held = self._held(owner)
        token = held.token if held is not None else flows.new_token()
        flow, cleanup = self._acquire_flow(token, blocking, timeout, socket_timeout)
        if held is not None and self.kind == "reentrant":
            # never undo an outer hold when a re-entry is interrupted
            return flow, _nothing, token
        return flow, cleanup, token

    def _finish_acquire(self, owner: Any, token: str, grant: Grant) -> Lease:
        key = self._owner_key(owner)
        held = self._holds.get(key)
        if held is not None and held.token == token and grant.reentered:
            held.count += 1
            held.lease.deadline, held.lease.sent_at = grant.deadline, grant.sent_at
            held.lease.count = grant.count
            held.lease.lost = False
            return held.lease
        # a new lease: also after an old hold of this owner expired on the server (its token is
        # reused so that a lease that is still there is reported as AlreadyHeld, not doubled)
        if held is not None:
            held.lease.lost = True
        lease = Lease.from_grant(self.name, grant, self.ttl)
        self._holds[key] = Held(token, lease, 1, not grant.waited)
        if grant.waited:
            self._loud = LOUD_RELEASES
        return lease

    def _begin_release(self, owner: Any) -> tuple[Flow, Held]:
        """The release flow of ``owner``'s hold. A hold that expects no waiter (``quiet``: its
        grant did not wait, it was never renewed, and this handle met no contention in its
        last :data:`LOUD_RELEASES` releases) sends RELEASE's short form first
        (:func:`redlease.core.flows.release`); waiters met there make the next releases
        loud."""
        held = self._held(owner)
        if held is None:
            raise NotOwned(self.name, "release of a lock this owner does not hold")
        quiet = None
        if self._loud:
            self._loud -= 1
        elif held.quiet:
            quiet = self._contended
        return self._release_flow(held.token, held.count <= 1, quiet), held

    def _contended(self) -> None:
        """Waiters met by a release expecting none: the next releases expect them."""
        self._loud = LOUD_RELEASES

    def _finish_release(self, owner: Any, held: Held) -> None:
        held.count -= 1
        held.lease.count = max(0, held.count)
        if held.count <= 0:
            self._holds.pop(self._owner_key(owner), None)

    def _forget(self, owner: Any, held: Held) -> None:
        """Drop a hold that Redis says is gone (release or extend refused)."""
        held.lease.lost = True
        self._holds.pop(self._owner_key(owner), None)

    def _begin_extend(
        self, owner: Any, ttl: float | None, timeout: float | None = None
    ) -> tuple[Flow, Held]:
        held = self._held(owner)
        if held is None:
            raise NotOwned(self.name, "extend of a lock this owner does not hold")
        if ttl is not None and (not isinstance(ttl, int | float) or ttl <= 0):
            raise ConfigError("ttl", f"must be > 0 seconds, got {ttl!r}")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ConfigError("timeout", f"must be > 0 seconds, got {timeout!r}")
        since = held.lease.server_time if self.one_clock else None
        return self._extend_flow(held.token, ttl, timeout, since), held

    @staticmethod
    def _finish_extend(held: Held, result: tuple[float, ServerTime], ttl: float | None) -> Lease:
        held.quiet = False  # a lease held this long may have gathered waiters
        held.lease.deadline, held.lease.server_time = result
        held.lease.sent_at, held.lease.renewed_ms = result[1].sent, result[1].server_ms
        if ttl is not None:
            held.lease.ttl = float(ttl)
        return held.lease


def _nothing() -> Flow:
    return
    yield  # pragma: no cover - makes this an empty generator
