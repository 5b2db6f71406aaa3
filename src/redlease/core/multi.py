"""Multi-key leases: several lock names held all-or-nothing as one lease, with one fencing token.

Where the names live decides the flows (pure, like :mod:`~redlease.core.flows`):

* **One Redis node**: one script per operation. The exclusive scripts take every name's keys at
  once (a :class:`~redlease.core.primitives.Primitive` with a ``group``): all names are checked and
  granted atomically; a blocked acquirer registers where it was refused and BLPOPs those wake
  lists (one node, one BLPOP on several lists).
* **Redis Cluster** (each ``{NAME}`` is its own slot) and **RedLock node sets** (each
  single-name operation is already a quorum operation): the names are acquired one by one in a
  fixed order (sorted), with the ordinary single-name scripts. A refusal gives back every name
  this attempt took, newest first, then waits for a wake token of the name that refused. A
  failure or an interruption leaves the same undo to :func:`abort`.

Fencing: each name's acquisition passes the highest token granted so far as its minimum, so the
last one carries the maximum; the earlier names' counters and lease records are raised to it
(``RAISE_FENCE``; on a node set confirmed by a quorum) before the lease is granted. The token is
thus above every token issued before for any of the names, and every later token of any of them
is above it. The single-node script does the same in one step.

No partial hold remains: every undo is by owner token, and on a node whose reply is missing it is
written behind the unanswered request on the same connection (see
:class:`redlease.core.client.Pins`; the quorum transport does the same per node).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redlease.core import flows, scripts
from redlease.core.client import Executor
from redlease.core.clock import Clock, ServerTime
from redlease.core.flows import Grant, confirm_replicas
from redlease.core.handles import HandleCore
from redlease.core.keys import LockKeys, name_of, validate_name
from redlease.core.pacing import Pacing
from redlease.core.primitives import Options, Primitive
from redlease.core.replies import Outcome, decode_acquire, decode_raise
from redlease.core.requests import Call, Flow, Request, Wait
from redlease.core.state import Holder, LockState, read_state_flow
from redlease.core.timing import local_deadline
from redlease.core.view import lock_view
from redlease.errors import AlreadyHeld, ConfigError, LockError, LockUnavailable, NotOwned


def check_names(names: Any) -> tuple[str, ...]:
    """Validate the lock names of a multi-key lease (``ConfigError`` on the field ``names``)."""
    if isinstance(names, str | bytes) or not isinstance(names, Sequence):
        raise ConfigError("names", f"must be a list of lock names, got {names!r}")
    if not names:
        raise ConfigError("names", "must name at least one lock")
    for name in names:
        validate_name(name, "names")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError("names", f"listed more than once: {', '.join(twice)}")
    return tuple(names)


# --- flows for a cluster or a node set: ordered acquisition with undo ----------------------------


@dataclass
class OrderedState:
    """What an interrupted ordered acquisition leaves for :func:`abort`."""

    taken: list[Primitive] = field(default_factory=list)  # granted by this attempt, in order
    in_flight: Primitive | None = None  # its request was sent, its reply not seen
    registered: list[Primitive] = field(default_factory=list)  # waiter registrations


def acquire(
    name: str,
    parts: Sequence[Primitive],
    token: str,
    *,
    blocking: bool,
    timeout: float | None,
    state: OrderedState,
    clock: Clock = time.monotonic,
    socket_timeout: float | None = None,
) -> Generator[Request, Any, Grant]:
    """Acquire ``parts`` in their order, all or nothing; wait like a single lock when blocking."""
    pacing = Pacing(
        parts[0].options,
        blocking=blocking,
        timeout=timeout,
        clock=clock,
        socket_timeout=socket_timeout,
    )
    while True:
        wait_ms = pacing.attempt()
        started = clock()
        grants: list[Outcome] = []
        refusal: tuple[Primitive, Outcome] | None = None
        for part in parts:
            state.in_flight = part
            floor = max((g.fence for g in grants), default=0)
            reply = yield part.acquire(token, wait_ms, floor)
            state.in_flight = None
            outcome = decode_acquire(reply, part.name)
            if outcome.status == scripts.GRANTED:
                state.taken.append(part)
                grants.append(outcome)
            elif outcome.status == scripts.ALREADY:
                raise AlreadyHeld(name, f"{part.name!r} is already held by this owner")
            else:
                refusal = (part, outcome)
                break
        if refusal is None:
            return (yield from _seal(name, parts, token, grants, started, clock))
        part, outcome = refusal
        if pacing.registering and part not in state.registered:
            # registered by the refusal: known before anything else is sent, so that an
            # interruption during the give-back below still leaves it (see abort)
            state.registered.append(part)
        while state.taken:  # give back what this attempt took, newest first
            yield state.taken[-1].release(token)
            state.taken.pop()
        for other in [p for p in state.registered if p != part]:  # wait on one name only
            yield other.leave(token)
            state.registered.remove(other)
        wait = pacing.refused(name, outcome, repr(part.name))
        yield Wait(part.wake_keys(), wait)


def _seal(
    name: str,
    parts: Sequence[Primitive],
    token: str,
    grants: Sequence[Outcome],
    started: float,
    clock: Clock,
) -> Generator[Request, Any, Grant]:
    """Every name is taken: put the highest token on every name, then grant (or raise: the
    caller's :func:`abort` gives everything back)."""
    opts = parts[0].options
    fence = max(g.fence for g in grants)
    for part, got in zip(parts, grants, strict=True):
        if got.fence < fence:
            reply = yield part.raise_fence(token, fence)
            if not decode_raise(reply, part.name).confirmed:
                raise LockUnavailable(
                    name, f"the lease on {part.name!r} ended before fencing token {fence} was set"
                )
    for part in parts:
        yield from confirm_replicas(name, part.keys.lease, opts, "acquisition")
    # the first name's lease started first: it bounds the whole lease
    deadline = local_deadline(started, opts.ttl)
    if clock() >= deadline:
        raise LockUnavailable(name, "taking every lock took longer than the TTL")
    return Grant(
        fence=fence,
        count=1,
        server_ms=max(g.server_ms for g in grants),
        transitions=max(g.transitions for g in grants),
        sent_at=started,
        deadline=deadline,
    )


def abort(token: str, state: OrderedState) -> Flow:
    """Undo an interrupted ordered acquisition: release every lock it may hold (those it took,
    newest first, then the one whose reply is missing: its undo waits behind that request) and
    drop its waiter registrations. Every undo is tried even if another one fails."""
    unanswered = [state.in_flight] if state.in_flight is not None else []
    maybe = [*reversed(state.taken), *unanswered]
    waiting = [*state.registered, *(p for p in unanswered if p not in state.registered)]
    error: LockError | None = None
    for call in [p.release(token) for p in maybe] + [p.leave(token) for p in waiting]:
        try:
            yield call
        except LockError as exc:
            error = error or exc
    if error is not None:
        raise error


def release(name: str, parts: Sequence[Primitive], token: str) -> Generator[Request, Any, int]:
    """Release every lock, newest first, each even if another fails; NotOwned if any of them
    was no longer held by this owner (the lease had been lost)."""
    error: LockError | None = None
    lost: list[str] = []
    for part in reversed(parts):
        try:
            yield from flows.release(part, token)
        except NotOwned:
            lost.append(part.name)
        except LockError as exc:
            error = error or exc
    if error is not None:
        raise error
    if lost:
        raise NotOwned(
            name, f"release refused for {', '.join(lost)}: not held by this owner (lease lost)"
        )
    return 0


def extend(
    name: str,
    parts: Sequence[Primitive],
    token: str,
    ttl: float | None,
    *,
    clock: Clock = time.monotonic,
    timeout: float | None = None,
) -> Generator[Request, Any, tuple[float, ServerTime]]:
    """Extend every lock in order; the new deadline is the first one's (the soonest expiry).
    NotOwned as soon as one lock is no longer held: the lease is lost."""
    start = clock()
    first: tuple[float, ServerTime] | None = None
    for part in parts:
        left = None if timeout is None else max(0.001, timeout - (clock() - start))
        try:
            got = yield from flows.extend(part, token, ttl, clock=clock, timeout=left)
        except NotOwned as exc:
            raise NotOwned(name, f"{part.name!r}: {exc.message}") from None
        first = first or got
    assert first is not None
    return first


def whole(name: str, names: Sequence[str], states: Mapping[str, LockState]) -> LockState:
    """The state of the lease over ``names`` by the lock view's rule
    (:func:`redlease.core.view.lock_view`): a holder, token and expiry only when every name
    carries the same lease; the counters of the first name."""
    if len(names) == 1:
        return states[names[0]]
    view = lock_view(names, {"": states}, quorum=1)
    first = states[names[0]]
    held = view.holder is not None
    return LockState(
        name=name,
        now_ms=first.now_ms,
        holder=view.holder,
        fencing_token=view.fencing_token,
        last_fence=view.last_fence,
        expires_in_ms=view.expires_in_ms,
        acquired_ms=view.acquired_ms,
        renewed_ms=view.renewed_ms,
        ttl_ms=first.ttl_ms if held else None,
        mode=first.mode if held else None,
        count=first.count if held else 0,
        transitions=view.transitions,
        last_transition_ms=view.last_transition_ms,
        readers=view.readers,
        waiters=view.waiters,
        candidates=view.candidates,
        holders=(
            (Holder(view.holder, view.fencing_token, view.expires_in_ms),)
            if view.holder is not None and view.fencing_token is not None
            else ()
        ),
    )


def give_back_if_lost(flow: Flow, release: Callable[[], Flow]) -> Flow:
    """Run ``flow`` (an extend); if it finds the lease lost (NotOwned: a lock expired or was
    taken), release the locks still held before re-raising, so that no part of a lost lease
    lingers until its expiry."""
    try:
        return (yield from flow)
    except NotOwned:
        with contextlib.suppress(LockError):
            yield from release()
        raise


def read_states(parts: Sequence[Primitive]) -> Generator[Request, Any, dict[str, LockState]]:
    """The live state of each lock, by name."""
    states: dict[str, LockState] = {}
    for part in parts:
        states[part.name] = yield from read_state_flow(part.keys)
    return states


# --- the handle bookkeeping --------------------------------------------------------------------


@dataclass
class Part:
    """One name of a multi-key lease, as a RedLock node set sees a lock handle: its primitive,
    TTL and the holds of the whole lease (a name is undone only when the token holds nothing)."""

    prim: Primitive
    _holds: Mapping[Any, Any]

    @property
    def ttl(self) -> float:
        return self.prim.options.ttl


class Router:
    """Sends each request to the executor of the lock its keys belong to: a multi-key lease on a
    RedLock node set has one quorum executor per name. ``execute`` returns what that executor
    returns (a reply, or an awaitable of it for asyncio executors), so both APIs use it."""

    cluster = False

    def __init__(
        self, nodes: Mapping[str, Executor], name: str, lock: str, socket_timeout: float | None
    ) -> None:
        self.nodes = nodes
        self.name = name
        self.lock = lock
        self.socket_timeout = socket_timeout

    def execute(self, req: Request) -> Any:
        key = req.keys[0] if isinstance(req, Call | Wait) else req.key
        return self.nodes[name_of(key)].execute(req)


class MultiCore(HandleCore):
    """The bookkeeping of a lease over several lock names (pure, shared by both APIs).

    ``names`` keeps the caller's order (the lease's name is ``"a,b"``); ``parts`` are the names
    in acquisition order (sorted). With one name this is exactly a :class:`~redlease.Lock`.
    """

    parts: tuple[Primitive, ...]
    ordered = False  # acquire name by name (cluster, node set) instead of in one script

    def _primitive(self, name: Any, options: Options) -> Primitive:
        self.names = check_names(name)
        self.parts = tuple(
            Primitive(LockKeys.for_name(n), options, self.kind) for n in sorted(self.names)
        )
        if len(self.parts) == 1:
            return self.parts[0]
        keys = tuple(LockKeys.for_name(n) for n in self.names)
        return Primitive(keys[0], options, self.kind, group=keys)

    def _executor(self, client: Any, plain: Callable[[Any, str], Executor]) -> Executor:
        if len(self.parts) == 1:
            return super()._executor(client, plain)
        if getattr(client, "is_redlease_nodeset", False):
            self.ordered = True
            self.parts = tuple(p.on_quorum() for p in self.parts)
            nodes = {p.name: client.node_for(Part(p, self._holds)) for p in self.parts}
            return Router(nodes, client.description, self.name, client.socket_timeout)
        node = plain(client, self.name)
        self.ordered = bool(getattr(node, "cluster", False))  # each {NAME} is its own slot
        return node

    def _acquire_flow(
        self, token: str, blocking: bool, timeout: float | None, socket_timeout: float | None
    ) -> tuple[Flow, Callable[[], Flow]]:
        if not self.ordered:
            return super()._acquire_flow(token, blocking, timeout, socket_timeout)
        state = OrderedState()
        flow = acquire(
            self.name,
            self.parts,
            token,
            blocking=blocking,
            timeout=timeout,
            state=state,
            socket_timeout=socket_timeout,
        )
        return flow, lambda: abort(token, state)

    def _release_flow(
        self, token: str, full: bool, quiet: Callable[[], object] | None = None
    ) -> Flow:
        if not self.ordered:
            return super()._release_flow(token, full, quiet)
        return release(self.name, self.parts, token)

    def _extend_flow(
        self, token: str, ttl: float | None, timeout: float | None, since: ServerTime | None = None
    ) -> Flow:
        if len(self.parts) == 1:
            return super()._extend_flow(token, ttl, timeout, since)
        if self.ordered:  # names on several servers: no one clock to compare
            flow = extend(self.name, self.parts, token, ttl, timeout=timeout)
        else:
            flow = super()._extend_flow(token, ttl, timeout, since)
        return give_back_if_lost(flow, lambda: self._release_flow(token, True))

    def _state_flow(self) -> Flow:
        states = yield from read_states(self.parts)
        return whole(self.name, self.names, states)

    def _states_flow(self) -> Flow:
        """Reads the live state of each lock, by name (``dict[str, LockState]``)."""
        return read_states(self.parts)
