"""The sidecar's observer loop, beside the campaign: every retry period (and at once after a
grant) it heartbeats and reads every node, builds the lock view and hands it to the
candidate; on the way out :func:`withdraw` takes the heartbeat off every node.

It is the only writer of node health (the view's ``nodes.healthy``). What it learns goes
through the elector it observes for (:class:`Observed`: the sidecar's
:class:`~redlease.sidecar.elector.SidecarElector`): transitions, ``/status`` changes, the
one-time warnings (a node that would lose leases across a restart, this identity held by
another process, nodes that answer but do not count).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Any, Protocol

import structlog

from redlease.core import _async
from redlease.core.durability import read_config, restart_loss
from redlease.core.keys import LockKeys
from redlease.core.observe import Notices, node_drivers, read_view
from redlease.core.restart import OPERATOR
from redlease.core.state import heartbeat_flow
from redlease.core.timing import REPLY_GRACE, call_timeout, heartbeat_ttl, within
from redlease.core.view import LockView
from redlease.errors import LockError
from redlease.sidecar.config import ElectionConfig
from redlease.sidecar.election import Candidate, Transition

log = structlog.get_logger("redlease.sidecar")
WITHDRAW = 0.5  # seconds a node may take to drop this candidate's heartbeat on the way out


class ObservedHooks(Protocol):
    def changed(self) -> None: ...

    def check_durability(self) -> bool: ...


class Observed(Protocol):
    """What the observer needs of its elector."""

    client: Any
    election: Candidate

    @property
    def config(self) -> ElectionConfig: ...

    @property
    def hooks(self) -> ObservedHooks: ...

    def refresh(self) -> None: ...

    def emit(self, transition: Transition) -> None: ...


class LockObserver:
    """Reads the lock view for ``elector`` while :attr:`running` (see the module docstring)."""

    def __init__(self, elector: Observed) -> None:
        self.elector = elector
        self.running = True  # the loop runs until stop()
        self._look = asyncio.Event()  # read the lock now: a grant came in that it may not show
        self._durability_checked = False
        self._notices = Notices()
        self._conflict = False  # the latest read showed our identity under another owner

    def look(self) -> None:
        """Read the lock now (a grant came in that the last view may not show)."""
        self._look.set()

    def stop(self) -> None:
        """End the loop (it also ends by itself at its next step)."""
        self.running = False
        self._look.set()

    async def run(self) -> None:
        """Every retry period, and at once after a grant (the view may predate it): heartbeat
        and read every node, build the lock view, hand it to the election. This is the only
        writer of node health (the view's ``nodes.healthy``); ends with the campaign."""
        elector = self.elector
        while self.running:
            cfg = elector.config
            started = time.monotonic()
            hb_ms = int(heartbeat_ttl(cfg.timing) * 1000)
            heartbeat = LockKeys.for_name(cfg.redis_lock)
            view = await read_view(
                elector.client,
                cfg.redis_keys,
                cfg.target.quorum,
                call_timeout(cfg.timing),
                functools.partial(heartbeat_flow, heartbeat, cfg.identity, hb_ms),
                limit=cfg.holders,
            )
            if not self.running:
                return
            if elector.config is cfg:
                if not self._durability_checked and view.healthy_nodes:
                    self._durability_checked = True
                    await self._warn_if_not_durable(view)
                self._note_outside(view)
                transition = elector.election.observe(view, started)
                if transition is not None:
                    elector.emit(transition)
                self._note_conflict()
            elector.refresh()
            elector.hooks.changed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._look.wait(), cfg.timing.retry_period)
            self._look.clear()

    async def _warn_if_not_durable(self, view: LockView) -> None:
        """Once, on a single node (a RedLock set has the restart rule): say what a restart of
        it would lose."""
        elector = self.elector
        if (
            view.nodes.total != 1
            or getattr(elector.client, "clients", None)
            or not elector.hooks.check_durability()
        ):
            return
        loss = restart_loss(await read_config(elector.client, 1.0))
        if loss is not None:
            log.warning(
                "the Redis node does not keep leases across a restart",
                lock=elector.config.lock,
                node=view.healthy_nodes[0],
                persistence=loss,
                effect="after a restart a second holder can be granted while this one still "
                "leads until its next renewal; fencing tokens still only grow",
                remedy="appendonly yes + appendfsync always, or a RedLock set of 3+ nodes",
            )
        log.debug("persistence checked", lock=elector.config.lock, loses=loss)  # after the warning

    def _note_conflict(self) -> None:
        """Say once (until it clears) that our identity is held by another owner: a second
        process with this ``--identity`` would otherwise only show ``holder: null``."""
        cfg = self.elector.config
        conflict = self.elector.election.conflict(time.monotonic())
        if conflict is not None and not self._conflict:
            log.warning("identity held by another process", lock=cfg.lock,
                        identity=cfg.identity, conflict=conflict)  # fmt: skip
        self._conflict = conflict is not None

    def _note_outside(self, view: LockView) -> None:
        """Log nodes that answer but do not count: what the operator must do, rate-limited."""
        due, back = self._notices.due(view, time.monotonic())
        for node in back:
            log.info("redis node counts again", lock=view.lock, node=node)
        for node, out in due:
            if out.kind == OPERATOR:
                log.warning(
                    "redis node needs an operator", lock=view.lock, node=node, why=out.why,
                    action=out.action,
                )  # fmt: skip
            else:
                log.info("redis node does not count yet", lock=view.lock, node=node, why=out.why)


async def withdraw(client: Any, cfg: ElectionConfig) -> None:
    """Take this candidate's heartbeat off every node of ``client``: at most :data:`WITHDRAW`
    seconds each (its requests, connecting included: a budget; the task cut a grace later)."""
    keys = LockKeys.for_name(cfg.redis_lock)
    for _, node in node_drivers(client, cfg.redis_lock):
        try:
            async with asyncio.timeout(WITHDRAW + REPLY_GRACE):
                flow = heartbeat_flow(keys, cfg.identity, 0)
                await _async.drive(node, flow, budget=within(WITHDRAW, time.monotonic()))
        except (LockError, TimeoutError) as exc:
            log.debug("candidate withdrawal failed", lock=cfg.lock, error=str(exc))
