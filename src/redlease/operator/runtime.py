"""The operator's refresh loop (:class:`Runtime`), over :mod:`reconcile` and :mod:`reader`.

One refresh loop (:meth:`Runtime.run`) does everything (validation, force release, status,
events) for every DistributedLock at once: one read per node per cycle (:class:`Refresher`),
then only the changed statuses are written, a bounded number at a time (:class:`Patcher`). The
loop learns the objects from one idle kopf daemon per object (:mod:`.handlers`), whose ``body``
kopf keeps up to date from its watch; no handler records progress, so the operator keeps no
change-detection annotations on the objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kopf

from redlease.errors import ConfigError
from redlease.kube.fields import unknown_fields
from redlease.kube.names import FORCE_RELEASE_ANNOTATION
from redlease.kube.resolver import resolve
from redlease.kube.secretspec import Credentials
from redlease.kube.spec import LockSpec
from redlease.kube.verbs import patch
from redlease.operator import apifaults, collector, metrics, ports, reconcile, webhook
from redlease.operator.config import OperatorConfig, api_client, lock_timeout
from redlease.operator.events import EventPoster
from redlease.operator.patcher import LockPart, Patcher
from redlease.operator.reader import NodeReader
from redlease.operator.refresher import Observation, Refresher
from redlease.operator.secrets import SecretSource

log = logging.getLogger("redlease.operator")
T = TypeVar("T")
R = TypeVar("R")


def _always() -> bool:
    return True


class Runtime:
    """What the handlers share: the objects to refresh, the refresh loop, the node reader, the
    cycle batcher, the status patcher and the secret source.

    ``leading`` says whether this replica is the active one (see :mod:`.leadership`): nothing
    is read, written or posted while it is false. ``serve_metrics``: this runtime serves
    ``--metrics`` itself (with leader election the process serves it, for standbys too)."""

    def __init__(
        self,
        config: OperatorConfig,
        secrets: SecretSource | None = None,
        locks: webhook.LockSource | None = None,
        *,
        leading: Callable[[], bool] = _always,
        serve_metrics: bool = True,
    ) -> None:
        self.config = config
        self.leading = leading
        self.serve_metrics = serve_metrics
        self.failures = 0  # cycles, or one object's refresh, that failed (tried again next cycle)
        self.reader = NodeReader(concurrency=config.concurrency, timeout=config.node_timeout)
        self.refresher = Refresher(self.reader.read, config.refresh)
        kube = secrets.kube if secrets is not None else api_client(config)
        self.kube = kube
        self.secrets = secrets or SecretSource(kube)
        limit = max(1, config.api_requests)
        self.patcher: Patcher[LockPart] = Patcher(self._send, limit=limit, allowed=leading)
        self.tracked: dict[str, kopf.Body] = {}  # uid -> kopf's live body of the object
        self.gone: dict[str, float] = {}  # uid -> monotonic time its daemon stopped
        self._arrived = asyncio.Event()
        self.locks = locks or webhook.LockSource(kube, timeout=lock_timeout(config))
        self.written: dict[str, dict[str, Any]] = {}  # uid -> the status we last wrote
        self.names: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self.released: dict[str, str] = {}  # uid -> force-release annotation already acted on
        self.events = EventPoster(limit=limit)
        self._task: asyncio.Task[None] | None = None
        self._cycles: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._metrics: Any = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = self._loop.create_task(self.refresher.run())
        if self._cycles is None:
            self._cycles = self._loop.create_task(self.run())
        if self.serve_metrics and self.config.metrics is not None and self._metrics is None:
            host, port = self.config.metrics
            self._metrics = await ports.serve_metrics(host, port, self.metrics_text)

    def metrics_text(self, leader: bool | None = None) -> str:
        """The exposition; may be called from another thread (the process's metrics server
        with leader election), hence the snapshots of the dicts first."""
        names = dict(self.names)
        statuses = [(*names[uid], st) for uid, st in list(self.written.items()) if uid in names]
        return metrics.render(
            cycles=self.refresher.cycles,
            locks=self.refresher.last_cycle_size,
            round_trips=self.reader.round_trips,
            statuses=statuses,
            failures=self.failures,
            last_refresh=self.refresher.last_cycle_wall,
            interval=self.config.refresh,
            leader=leader,
            tasks=self._tasks(),
        )

    def _tasks(self) -> int | None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return None
        try:
            return len(asyncio.all_tasks(loop))
        except RuntimeError:  # the set changed under a reader in another thread, repeatedly
            return None

    async def stop(self) -> None:
        if self._metrics is not None:
            await self._metrics.close()
            self._metrics = None
        for task in (self._cycles, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._cycles = self._task = None
        await self.patcher.aclose()
        await self.events.aclose()
        await self.reader.aclose()
        await close_clients(self.locks, self.secrets)

    def health(self) -> dict[str, Any]:
        loops = (self._task, self._cycles)
        if any(t is None or t.done() for t in loops) or self.refresher.stale():
            raise kopf.PermanentError("the refresh loop is not running")
        return {"cycles": self.refresher.cycles, "locks": self.refresher.last_cycle_size}

    def track(self, uid: str, body: kopf.Body) -> None:
        """Refresh this object from the next cycle on (``body``: kopf's live view of it)."""
        self.tracked[uid] = body
        self.gone.pop(uid, None)
        self._arrived.set()

    def untrack(self, uid: str) -> None:
        """Stop refreshing an object whose daemon stopped. What was written for it is kept a
        while: kopf restarts daemons (a relist) with bodies that can be older than our last
        status patch, and the memory keeps the Events of such a restart from being posted
        again (tests/operator/test_api_faults.py)."""
        self.tracked.pop(uid, None)
        self.gone[uid] = time.monotonic()

    def _forget_gone(self) -> None:
        """Drop the memory of objects untracked long ago (deleted)."""
        horizon = max(10 * self.config.refresh, 60.0)
        now = time.monotonic()
        for uid in [u for u, t in self.gone.items() if now - t > horizon]:
            self.gone.pop(uid, None)
            self.written.pop(uid, None)
            self.names.pop(uid, None)
            self.released.pop(uid, None)

    async def run(self) -> None:
        """The refresh loop: one :meth:`cycle` after another (the refresher keeps the cadence),
        on the active replica only, while there is anything to refresh."""
        while True:
            if not self.tracked:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            if not self.leading():
                await asyncio.sleep(self.config.refresh)
                continue
            try:
                await self.refresher.due()
                await self.cycle()
            except Exception:  # noqa: BLE001 - a failed cycle is logged; the next one runs
                self.failures += 1
                log.exception("refresh cycle failed")
                await asyncio.sleep(self.config.refresh)

    async def cycle(self) -> None:
        """Refresh every tracked object: validate, force-release if asked, read them all in one
        read per node, then post the Events and hand the changed statuses to the patcher. The
        cyclic garbage collector is paused meanwhile (:mod:`.collector`: the cost per lock stays
        flat with thousands of locks)."""
        async with collector.paused.at_most():
            await self._cycle()

    async def _cycle(self) -> None:
        self._forget_gone()
        bodies = list(self.tracked.items())
        limit = max(1, self.config.api_requests)
        prepared = [p for p in await bounded(bodies, self._prepare, limit) if p is not None]
        valid = [p for p in prepared if p.spec is not None]
        for p in valid:
            await self._maybe_release(p)
        views = await self.refresher.observe_all([(p.spec, p.creds) for p in valid])  # type: ignore[misc]
        observed = {id(p): v for p, v in zip(valid, views, strict=True)}
        if not self.leading():
            return  # the lease was lost while reading: the next active replica writes
        for p in prepared:
            if p.uid in self.tracked:
                self._finish(p, observed.get(id(p)))

    async def _prepare(self, item: tuple[str, kopf.Body]) -> Prepared | None:
        """One object's spec with its scope and Secrets (or why it is invalid); None when it
        cannot be prepared at all (logged; its next cycle tries again)."""
        uid, body = item
        meta = body.get("metadata", {})
        p = Prepared(
            uid=uid,
            body=body,
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name")),
            generation=meta.get("generation"),
            previous=self.written.get(uid),
        )
        if p.previous is None:
            p.previous = copy.deepcopy(dict(body.get("status") or {}))
        p.unknown = unknown_fields(body)
        try:
            lock = await resolve(body.get("spec"), p.namespace, self.secrets)
            p.spec, p.creds = lock.spec, lock.credentials
        except ConfigError as exc:
            p.spec, p.invalid = None, exc
        except Exception:  # noqa: BLE001 - one object's failure never fails the others
            self.failures += 1
            log.exception("%s/%s: cannot refresh", p.namespace, p.name)
            return None
        return p

    async def _maybe_release(self, p: Prepared) -> None:
        """Act on a force-release annotation once (until the annotation is removed)."""
        request = (p.body.get("metadata", {}).get("annotations") or {}).get(
            FORCE_RELEASE_ANNOTATION
        )
        if request is None:
            self.released.pop(p.uid, None)
        elif self.released.get(p.uid) != request and await self._force_release(p):
            self.released[p.uid] = request  # done; skip it until its removal is seen

    def _finish(self, p: Prepared, observation: Observation | None) -> None:
        """The object's new status from its read: post the Events it warrants and queue the
        status patch if anything changed."""
        previous = p.previous or {}
        if p.spec is None or observation is None:
            assert p.invalid is not None
            new = reconcile.invalid_status(
                p.invalid,
                generation=p.generation,
                previous=previous,
                now=time.time(),
                unknown=p.unknown,
            )
        else:
            view, read_at = observation
            new = reconcile.compute_status(
                p.spec,
                view,
                read_at=read_at,
                generation=p.generation,
                previous=previous,
                now=time.time(),
                unknown=p.unknown,
            )
        diff = reconcile.status_patch(previous, new, now=time.time(), refresh=self.config.refresh)
        for event in reconcile.decide_events(previous, new, p.invalid):
            self.events.post(p.body, type=event.type, reason=event.reason, message=event.message)
            # Our own logger: kopf's per-object logger is quiet unless --verbose (see runner).
            log.log(
                logging.WARNING if event.type == reconcile.WARNING else logging.INFO,
                "%s/%s %s: %s",
                p.namespace,
                p.name,
                event.reason,
                event.message,
            )
        if diff is not None:
            self.patcher.submit(LockPart(p.namespace, p.name, "status"), {"status": diff})
            self.written[p.uid] = new
        self.names[p.uid] = (p.namespace, p.name)

    async def _send(self, part: LockPart, body: dict[str, Any]) -> None:
        await patch.lock(
            self.kube,
            part.namespace,
            part.name,
            body,
            subresource=part.subresource,
            timeout=apifaults.REQUEST_TIMEOUT,
        )

    async def _force_release(self, p: Prepared) -> bool:
        """Force-release on every node; True (and the annotation's removal queued) once a
        quorum did."""
        assert p.spec is not None
        meta = p.body.get("metadata", {})
        value = (meta.get("annotations") or {}).get(FORCE_RELEASE_ANNOTATION)
        status = p.body.get("status") or {}
        # a semaphore's status lists every holder (status.holders); a mutex's names the one
        holders = [str(h.get("holder")) for h in status.get("holders") or []]
        holder = ", ".join(holders) or status.get("holder")
        results = await self.reader.force_release(p.spec, p.creds)
        failed = {n: r for n, r in results.items() if isinstance(r, BaseException)}
        done = len(results) - len(failed)
        removed = sum(r[0] for r in results.values() if not isinstance(r, BaseException))
        message = (
            f"force release ({value or 'no reason given'}): lease of "
            f"{holder or 'no known holder'} removed on {done}/{len(results)} nodes "
            f"({removed} lease records); fence counter kept"
        )
        if failed:
            message += "; failed on " + ", ".join(f"{n}: {e}" for n, e in failed.items())
        self.events.post(p.body, type=reconcile.WARNING, reason="ForceReleased", message=message)
        log.warning("%s/%s ForceReleased: %s", p.namespace, p.name, message)
        if done < p.spec.quorum:
            return False  # keep the annotation: retried next cycle
        annotations = {FORCE_RELEASE_ANNOTATION: None}
        self.patcher.submit(
            LockPart(p.namespace, p.name), {"metadata": {"annotations": annotations}}
        )
        return True


@dataclass(slots=True)
class Prepared:
    """One object in one cycle: what :meth:`Runtime.cycle` knows about it before the read."""

    uid: str
    body: kopf.Body
    namespace: str
    name: str
    generation: Any
    previous: dict[str, Any] | None
    spec: LockSpec | None = None
    creds: Credentials | None = None
    invalid: ConfigError | None = None
    unknown: list[ConfigError] = field(default_factory=list)  # fields the CRD does not declare


async def bounded(items: Sequence[T], fn: Callable[[T], Awaitable[R]], limit: int) -> list[R]:
    """``[await fn(item) for item in items]`` with at most ``limit`` awaiting at once (that
    many tasks, not one per item; items that need no I/O run without a switch)."""
    results: list[R | None] = [None] * len(items)
    todo = iter(enumerate(items))

    async def worker() -> None:
        for i, item in todo:
            results[i] = await fn(item)

    await asyncio.gather(*(worker() for _ in range(min(limit, len(items)))))
    return results  # type: ignore[return-value]


async def close_clients(locks: webhook.LockSource, secrets: SecretSource) -> None:
    """Close the connections this loop opened (a kopf stopping in its thread)."""
    await locks.kube.close()
    await secrets.kube.close()


__all__ = ["Prepared", "Runtime", "bounded", "close_clients"]
