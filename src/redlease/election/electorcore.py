"""The elector's core, shared by both flavours (:mod:`redlease.election.elector`):
:class:`ElectorCore` runs the one campaign loop (:class:`~redlease.election.campaign.Campaign`
over a :class:`~redlease.election.redislease.RedisLease`) on an asyncio loop and turns its hooks
into the user's callbacks; :class:`Facade` holds the options both flavours take, checked the
same way. See docs/elector.md."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redlease.core import _log as log
from redlease.core import aio, locks
from redlease.core.arguments import check_flavour, checked_keywords
from redlease.core.lease import Lease
from redlease.core.term import DEADLINE_PASSED, Election
from redlease.core.timing import (
    DEFAULT_TTL,
    Timing,
    acquire_timeout,
    elector_periods,
    validate_timing,
)
from redlease.election.campaign import SHUTDOWN, Campaign, Granted
from redlease.election.redislease import RedisLease
from redlease.errors import ConfigError

STOPPED = SHUTDOWN  # the reason given to on_stopped_leading by stop(): the lease is released
Callback = Callable[[Any], Any]  # returns None, or an awaitable (asyncio flavour)


def check_callbacks(**callbacks: Callback | None) -> None:
    """Each callback is None or callable; ConfigError names the one that is not."""
    for name, callback in callbacks.items():
        if callback is not None and not callable(callback):
            raise ConfigError(name, f"must be callable or None, got {callback!r}")


class ElectorCore:
    """The campaign for one lock and the callbacks it drives (both flavours).

    ``lock``: the lease this candidate runs for (asyncio, or blocking with ``offload`` set by
    the caller per run); ``timing``: client-go's three timings (the leader renews every retry
    period, leads until its renew deadline; a standby's acquire waits a retry period).
    """

    def __init__(
        self,
        lock: aio.Lock | locks.Lock,
        timing: Timing,
        callbacks: dict[str, Callback | None],
    ) -> None:
        self.lock = lock
        self.timing = timing
        self.callbacks = callbacks
        self.campaign: Campaign[Lease] | None = None
        self.holder: str | None = None  # the holder last reported to on_new_leader
        # run(work): started for each term with its lease, cancelled when the term ends
        self.work: Callable[[Lease], Awaitable[Any]] | None = None
        self._term: asyncio.Task[None] | None = None

    @property
    def identity(self) -> str:
        return self.lock.identity

    def leading(self) -> bool:
        """True while this candidate leads: a term runs and its renew deadline is ahead."""
        return self.campaign is not None and self.campaign.leading()

    def lease(self) -> Lease | None:
        """The lease while leading (its ``fencing_token`` is the term's), else None."""
        return self.lock.lease() if self.leading() else None

    async def run(self, stop: asyncio.Event, offload: ThreadPoolExecutor | None = None) -> None:
        """Campaign until ``stop`` is set; a running term ends (``on_stopped_leading`` with
        :data:`STOPPED`) and the lease is released on the way out."""
        timing = self.timing
        backend = RedisLease(
            self.lock, timing.retry_period, renew_timeout=timing.renew_deadline, offload=offload
        )
        self.holder = None
        await self._peek(backend)
        self.campaign = Campaign(
            Election(*elector_periods(timing)),
            backend,
            self,
            acquire_timeout=acquire_timeout(timing),
            watcher=self,
        )
        try:
            await self.campaign.run(stop)
        finally:
            await self._end_work()

    async def _peek(self, backend: RedisLease) -> None:
        """Name the holder before the first acquire (it may wait a retry period): one read of
        the lock view, at the start only; an error here is the campaign's to report."""
        try:
            async with asyncio.timeout(self.timing.retry_period):
                holder = await backend.holder()
        except Exception:  # noqa: BLE001 - the first acquire meets the same error and reports it
            return
        if holder is not None:
            await self._observe(holder)

    # -- the campaign's hooks -----------------------------------------------------------------

    async def started(self, granted: Granted[Lease]) -> None:
        await self._observe(self.identity)
        await self._call("on_started_leading", granted.record)
        if self.work is not None:
            self._term = asyncio.create_task(
                self._work(self.work, granted.record), name=f"redlease-term-{self.lock.name}"
            )

    async def stopped(self, reason: str) -> None:
        self.holder = None  # the next holder seen is reported, even this process again
        await self._end_work()
        await self._call("on_stopped_leading", reason)

    async def _work(self, work: Callable[[Lease], Awaitable[Any]], lease: Lease) -> None:
        """One term's work; its error is logged (the term goes on: leadership is the
        campaign's to end, as a callback's error)."""
        try:
            await work(lease)
        except Exception:  # noqa: BLE001 - the user's work must not kill the elector
            log.exception("work failed while leading", lock=self.lock.name)

    async def _end_work(self) -> None:
        """Cancel the term's work (client-go's cancelled context) and wait for it to end."""
        task, self._term = self._term, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    def released(self, outcome: bool | Exception) -> None:
        if isinstance(outcome, Exception):
            log.warning(
                "lease not released (it expires by itself)", lock=self.lock.name, error=str(outcome)
            )

    async def held(self, holder: str | None) -> None:
        if holder is not None:
            await self._observe(holder)

    async def _observe(self, holder: str) -> None:
        if holder != self.holder:
            self.holder = holder
            await self._call("on_new_leader", holder)

    async def _call(self, name: str, arg: object) -> None:
        """Run one callback (awaiting what it returns, if awaitable); an error is logged and
        the campaign goes on."""
        callback = self.callbacks.get(name)
        if callback is None:
            return
        try:
            result = callback(arg)
            if inspect.isawaitable(result):
                await result
        except Exception:  # noqa: BLE001 - a user callback must not kill the elector
            log.exception(f"{name} callback failed", lock=self.lock.name)


class Facade:
    """What both flavours share: the options (checked the same way; ConfigError names the
    argument), the core and what it reports. ``lock_class``: the flavour's lock."""

    STOPPED = STOPPED
    DEADLINE_PASSED = DEADLINE_PASSED
    lock_class: type[aio.Lock] | type[locks.Lock]

    @checked_keywords
    def __init__(
        self,
        client: Any,
        name: str,
        *,
        identity: str | None = None,
        ttl: float = DEFAULT_TTL,
        renew_deadline: float | None = None,
        retry_period: float | None = None,
        on_started_leading: Callable[[Lease], Awaitable[None] | None] | None = None,
        on_stopped_leading: Callable[[str], Awaitable[None] | None] | None = None,
        on_new_leader: Callable[[str], Awaitable[None] | None] | None = None,
    ) -> None:
        for field, value in (
            ("ttl", ttl),
            ("renew_deadline", renew_deadline),
            ("retry_period", retry_period),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ConfigError(field, f"must be a number of seconds, got {value!r}")
        timing = validate_timing(
            ttl, renew_deadline, retry_period, names=("ttl", "renew_deadline", "retry_period")
        )
        callbacks: dict[str, Callback | None] = {
            "on_started_leading": on_started_leading,
            "on_stopped_leading": on_stopped_leading,
            "on_new_leader": on_new_leader,
        }
        check_callbacks(**callbacks)
        check_flavour(client, self.lock_class.asyncio, "Elector")
        lock = self.lock_class(client, name, ttl=timing.ttl, identity=identity)
        self.core = ElectorCore(lock, timing, callbacks)
        self._setup()

    def _setup(self) -> None:
        """The flavour's own state (its task or thread)."""

    @property
    def identity(self) -> str:
        return self.core.identity

    @property
    def lease(self) -> Lease | None:
        """The lease while leading (``lease.fencing_token``), else None."""
        return self.core.lease()

    @property
    def leader(self) -> str | None:
        """The holder last reported to ``on_new_leader`` (None: none seen since the start or
        since this process stopped leading)."""
        return self.core.holder


__all__ = ["STOPPED", "Callback", "ElectorCore", "Facade", "check_callbacks"]
