"""Reading (and force-releasing) many locks on many Redis nodes at once, with asyncio.

Locks are read and released under the Redis names of their keys (``LockSpec.redis_keys``:
scoped to the lock's namespace unless the cluster admin shares them).

One refresh groups every lock key by node: each node gets ``ceil(keys / chunk)`` pipelined
round trips of ``EVALSHA STATUS`` (``SCRIPT LOAD`` once per client, again only after
``NOSCRIPT``, e.g. when a node restarted empty). Nodes are read concurrently, at most
``concurrency`` at a time, each bounded by ``timeout`` seconds, on ``redis.asyncio`` clients,
so kopf's event loop is never blocked. Redis Cluster refuses ``EVALSHA`` in pipelines, so a
cluster gets concurrent single calls instead (still one round trip per key, bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypeVar

import redis.exceptions as rex

from redlease.core import scripts
from redlease.core.admin import force_release_call
from redlease.core.connect import Target, connect_target
from redlease.core.keys import LockKeys
from redlease.core.observe import node_probe
from redlease.core.restart import Probe
from redlease.core.rules import semaphore_quorum
from redlease.core.state import LockState, decode_state, status_call
from redlease.core.urls import redact
from redlease.core.view import LockView, lock_view
from redlease.errors import LockError
from redlease.kube.secretspec import Credentials
from redlease.kube.spec import LockSpec

# What a node read may fail with. Anything else (a client redis-py refuses to build from a
# URL, a reply no decoder expects) is logged, and still fails only the locks on that node:
# one lock's nodes never fail another lock's refresh.
NODE_ERRORS = (rex.RedisError, OSError, TimeoutError, LockError)
FORCE_HANDOFF_MS = 250
T = TypeVar("T")
Read = tuple[str, int]  # a Redis lock name and how many slots of it to read (spec.holders)
log = logging.getLogger("redlease.operator")


def targets_for(spec: LockSpec, creds: Credentials | None = None) -> list[Target]:
    """One connection target per counted node of a lock, in the order of its node names."""
    target = spec.target
    if creds is not None:
        target = target.with_credentials(creds.username, creds.password, creds.consent)
    return target.nodes()


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class NodeReader:
    """Bounded, pipelined, concurrent STATUS reads; keeps one client per target."""

    def __init__(
        self,
        *,
        concurrency: int = 16,
        timeout: float = 5.0,
        chunk: int = 500,
        idle_reads: int = 20,
    ) -> None:
        self.concurrency = concurrency
        self.timeout = timeout
        self.chunk = chunk
        self.idle_reads = idle_reads
        self.round_trips = 0  # Redis round trips made so far (for metrics and benchmarks)
        self._clients: dict[Target, Any] = {}
        self._last_used: dict[Target, int] = {}
        self._loaded: set[Target] = set()
        self._reads = 0

    def _client(self, target: Target) -> Any:
        client = self._clients.get(target)
        if client is None:
            client = connect_target(target, asyncio=True, socket_timeout=self.timeout)
            self._clients[target] = client
        self._last_used[target] = self._reads
        return client

    async def _load(self, target: Target, client: Any) -> None:
        await client.script_load(scripts.STATUS.lua)
        self.round_trips += 1
        self._loaded.add(target)

    async def _pipeline(self, client: Any, names: Sequence[Read]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for name, limit in names:
            call = status_call(LockKeys.for_name(name), limit)
            pipe.evalsha(scripts.STATUS.sha, len(call.keys), *call.keys)
        self.round_trips += 1
        return list(await pipe.execute(raise_on_error=False))

    async def _cluster_calls(self, client: Any, names: Sequence[Read]) -> list[Any]:
        sem = asyncio.Semaphore(64)

        async def one(read: Read) -> Any:
            call = status_call(LockKeys.for_name(read[0]), read[1])
            async with sem:
                self.round_trips += 1
                try:
                    return await client.evalsha(scripts.STATUS.sha, len(call.keys), *call.keys)
                except rex.NoScriptError as exc:
                    return exc

        return list(await asyncio.gather(*(one(n) for n in names)))

    async def _read_target(self, target: Target, names: Sequence[Read]) -> dict[str, LockState]:
        client = self._client(target)
        if target not in self._loaded:
            await self._load(target, client)
        batch = self._cluster_calls if target.cluster else self._pipeline
        out: dict[str, LockState] = {}
        for chunk in _chunks(names, self.chunk):
            replies = await batch(client, chunk)
            if any(isinstance(r, rex.NoScriptError) for r in replies):
                await self._load(target, client)  # the node lost its script cache
                replies = await batch(client, chunk)
            for (name, _), reply in zip(chunk, replies, strict=True):
                if isinstance(reply, BaseException):
                    raise reply
                out[name] = decode_state(LockKeys.for_name(name), reply)
        return out

    async def read(
        self, requests: Sequence[tuple[LockSpec, Credentials | None]]
    ) -> list[tuple[LockView, float]]:
        """One (view, wall-clock time the read started) per request, reading each node once
        for all requested keys."""
        started = time.time()
        self._reads += 1
        # node -> Redis name -> slots to read (the largest limit of the locks that name it)
        wanted: dict[Target, dict[str, int]] = defaultdict(dict)
        for spec, creds in requests:
            for target in targets_for(spec, creds):
                for name in spec.redis_keys:
                    wanted[target][name] = max(spec.holders, wanted[target].get(name, 1))
        results: dict[Target, dict[str, LockState] | BaseException] = {}
        # RedLock nodes: their markers say whether they count (one more read per node)
        sets = [targets_for(spec, creds) for spec, creds in requests]
        marked = {t for ts in sets if len(ts) > 1 for t in ts}
        probes: dict[Target, Probe] = {}
        sem = asyncio.Semaphore(self.concurrency)

        async def read_node(target: Target, names: list[Read]) -> dict[str, LockState]:
            if target in marked:
                probes[target] = await node_probe(self._client(target))
                self.round_trips += 1
            return await self._read_target(target, names)

        async def one(target: Target, names: list[Read]) -> None:
            async with sem:
                try:
                    results[target] = await asyncio.wait_for(read_node(target, names), self.timeout)
                except TimeoutError:
                    results[target] = TimeoutError(f"no answer within {self.timeout:g}s")
                    await self._drop(target)
                except NODE_ERRORS as exc:
                    results[target] = exc
                    await self._drop(target)
                except Exception as exc:  # noqa: BLE001 - see NODE_ERRORS
                    log.warning("node %s failed unexpectedly: %r", redact(target.urls[0]), exc)
                    results[target] = exc
                    await self._drop(target)

        await asyncio.gather(*(one(t, sorted(n.items())) for t, n in wanted.items()))
        await self._gc()
        views = []
        for spec, creds in requests:
            named = list(zip(spec.node_names, targets_for(spec, creds), strict=True))
            per_node = {name: results[t] for name, t in named}
            seen = {name: probes.get(t) for name, t in named} if len(named) > 1 else None
            # a semaphore's holders are named on the quorum its clients hold them on
            quorum = semaphore_quorum(spec.total_nodes, spec.quorum, spec.holders)
            strict = spec.target.strict_restart
            view = lock_view(spec.redis_keys, per_node, quorum, probes=seen, strict_restart=strict)
            views.append((view, started))
        return views

    async def force_release(
        self, spec: LockSpec, creds: Credentials | None = None
    ) -> dict[str, tuple[int, int] | BaseException]:
        """FORCE_RELEASE every key on every node: ``{node: (leases removed, readers removed)}``;
        every slot of a counting semaphore (``spec.holders``) is released too.

        The fence counter is kept, so tokens stay monotonic; waiters are woken.
        """

        async def one(target: Target) -> tuple[int, int] | BaseException:
            client = self._client(target)
            leases = readers = 0
            try:
                for name in spec.redis_keys:
                    call = force_release_call(
                        LockKeys.for_name(name), spec.holders, FORCE_HANDOFF_MS
                    )
                    reply = await asyncio.wait_for(
                        client.eval(call.script.lua, len(call.keys), *call.keys, *call.args),
                        self.timeout,
                    )
                    self.round_trips += 1
                    leases += int(reply[0])
                    readers += int(reply[1])
            except TimeoutError:
                await self._drop(target)
                return TimeoutError(f"no answer within {self.timeout:g}s")
            except NODE_ERRORS as exc:
                await self._drop(target)
                return exc
            return leases, readers

        targets = targets_for(spec, creds)
        replies = await asyncio.gather(*(one(t) for t in targets))
        return dict(zip(spec.node_names, replies, strict=True))

    async def _drop(self, target: Target) -> None:
        """Forget a failed client (a fresh one reconnects cleanly next time)."""
        client = self._clients.pop(target, None)
        self._loaded.discard(target)
        self._last_used.pop(target, None)
        if client is not None:
            await _close(client)

    async def _gc(self) -> None:
        stale = [t for t, n in self._last_used.items() if self._reads - n > self.idle_reads]
        for target in stale:
            await self._drop(target)

    async def aclose(self) -> None:
        for target in list(self._clients):
            await self._drop(target)


async def _close(client: Any) -> None:
    with contextlib.suppress(*NODE_ERRORS):  # closing a broken connection may fail again
        await client.aclose()
