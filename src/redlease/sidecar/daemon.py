"""`redlease sidecar`: the election plus its outputs (HTTP, state file, pod label, and opt-in
a Lease mirror and Events: :mod:`.mirror`).

Start-up order: state directory, Kubernetes settings (``--lock-ref``), HTTP server, then the
election. On SIGTERM/SIGINT the step-down is published and the lease released at once (a
standby takes over within milliseconds), the pod label is set to ``false``, and the process
exits 0. With ``--drain-timeout`` a leader first drains: it publishes ``leader: false,
draining: true`` (status, state file without the marker, pod label) and keeps renewing until
the app calls ``POST /drained`` or the drain ends (:mod:`.elector`), then releases; a second
signal releases at once. If the step-down cannot be written to the state directory, the lease
is held, unrenewed, until the published claim has run out (:mod:`.statefile`), then released.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import time
from typing import Any

import structlog

from redlease.core.urls import redact
from redlease.core.view import iso_ms
from redlease.errors import ConfigError
from redlease.kube import sidecar_args
from redlease.kube.auth import required
from redlease.kube.client import KubeClient
from redlease.serving.httpguard import GuardedServer
from redlease.sidecar import status
from redlease.sidecar.changes import Changes
from redlease.sidecar.config import ElectionConfig, HttpAddress, SidecarConfig
from redlease.sidecar.dapr import DaprApi
from redlease.sidecar.election import Transition
from redlease.sidecar.elector import Hooks, SidecarElector
from redlease.sidecar.lockapi import LockApi
from redlease.sidecar.lockref import LockRefFollower
from redlease.sidecar.metrics import Metrics
from redlease.sidecar.mirror import LeaderEvents, LeaseMirror, involved_lease, involved_lock
from redlease.sidecar.podlabel import PodLabeller
from redlease.sidecar.probes import NEVER, ProbeProcess, Verdict
from redlease.sidecar.statefile import StateFile, WriteHealth
from redlease.sidecar.web import api_routes, serve

log = structlog.get_logger("redlease.sidecar")


class Sidecar(Hooks):
    """One running sidecar; also the :class:`~redlease.sidecar.web.Source` of its endpoints."""

    def __init__(self, config: SidecarConfig, probes: ProbeProcess | None = None) -> None:
        self.config = config
        self._probes = probes  # --probes: a process of its own, answering from our verdict
        self.state_file: StateFile | None = None
        self.metrics_ = Metrics(config.election.lock if config.election else "")
        self.elector: SidecarElector | None = None
        self.labeller: PodLabeller | None = None
        self.mirror: LeaseMirror | None = None
        self.events: LeaderEvents | None = None
        self.writes = WriteHealth()
        self.changes = Changes()  # the documents' versions; wakes long-polls
        self._stopping = asyncio.Event()
        self.follower: LockRefFollower | None = None
        self._kube: KubeClient | None = None
        self._servers: list[GuardedServer] = []
        self._state_dir_lock: int | None = None  # the descriptor of the state dir's lock file
        self._background: list[asyncio.Task[None]] = []
        self.lockapi = LockApi(config.api_locks, config.identity) if config.api_locks else None
        self.dapr = (
            DaprApi(self.lockapi, config.dapr_store)
            if self.lockapi is not None and config.dapr_store
            else None
        )

    # -- Source -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        if self.elector is None:
            election = self.config.election
            doc = {
                "lock": election.lock if election else None,
                "identity": self.config.identity,
                "leader": False,
                "draining": False,
                "holder": None,
            }
            return self.changes.stamp(doc)
        self.elector.refresh()
        return self._snapshot()

    def drained(self) -> bool:
        return self.elector is not None and self.elector.drained()

    async def wait_change(self, since: str, timeout: float) -> None:
        await self.changes.wait(since, timeout)

    def health(self) -> dict[str, Any]:
        """``/healthz``: ok while the election loop runs and the state file can be written."""
        loop = self.elector is not None and self.elector.healthy()
        failing = self.writes.failing
        doc: dict[str, Any] = {"ok": loop and failing is None, "election_loop": loop}
        problem = self.follower.problem if self.follower is not None else None
        if problem is not None:
            doc["lock_ref_error"] = problem  # e.g. a spec whose nodes are not the pinned ones
        if failing is not None:
            doc["state_file_error"] = {
                "kind": failing.kind,
                "error": failing.error,
                "since": iso_ms(int(failing.since * 1000)),
                "failures": failing.failures,
            }
        return doc

    def ready(self) -> tuple[bool, bool]:
        """(ready, leader) for ``/readyz`` by ``--ready``: ``connected`` (a quorum of nodes
        answered the latest read), ``leader`` or ``always``."""
        leader = bool(self.status()["leader"])
        mode = self.config.ready
        if mode == "always":
            return True, leader
        if mode == "leader":
            return leader, leader
        connected = self.elector is not None and self.elector.election.connected(time.monotonic())
        return connected, leader

    def verdict(self) -> Verdict:
        """``--probes`` (:mod:`.probes`): healthy while :meth:`health` says ok, until the
        election loop's current step is overdue; ready while :meth:`ready` says so, and when
        that rests on leadership only until the term's local deadline (no probe answer claims
        leadership after the renew deadline, however late the next publication comes)."""
        elector = self.elector
        ok = bool(self.health()["ok"])
        ready, leader = self.ready()
        healthy_until = elector.healthy_until() if ok and elector is not None else NEVER
        ready_until = math.inf if ready else NEVER
        if ready and leader and self.config.ready != "always" and elector is not None:
            ready_until = elector.election.leads_until()
        return Verdict(healthy_until, ready_until)

    def metrics(self) -> bytes:
        self.changed()
        self.metrics_.waiting(self.changes.waiting)
        return self.metrics_.render()

    # -- Hooks --------------------------------------------------------------------------------

    def transition(self, transition: Transition) -> None:
        self.metrics_.transition(transition)
        if self.events is not None:
            self.events.transition(transition)

    def changed(self) -> None:
        if self._probes is not None:
            self._probes.poke()
        if self.elector is None:
            return
        doc = self._snapshot()
        if self.state_file is not None:
            self._publish(self.state_file, doc)
        self.metrics_.update(doc)
        self.metrics_.not_counting(self.elector.election.view().outside)
        self.metrics_.timing(self.elector.config.timing)
        if self.labeller is not None:
            self.labeller.set(bool(doc["leader"]))
        if self.mirror is not None:
            assert self.elector is not None
            timing = self.elector.config.timing
            self.mirror.update(doc, timing.ttl, timing.retry_period)

    def renewed(self, latency: float) -> None:
        self.metrics_.renewed(latency)

    def error(self, kind: str) -> None:
        self.metrics_.error(kind)

    def claim_until(self) -> float | None:
        return None if self.state_file is None else self.state_file.claim_until

    def _publish(self, state_file: StateFile, doc: dict[str, Any]) -> None:
        """Write the state file; a failure shows in ``/healthz`` and ``/metrics`` and is logged
        once per kind per interval."""
        try:
            state_file.publish(doc)
        except OSError as exc:
            self.metrics_.state_file_failed(exc)
            held = self.writes.failed(exc, time.monotonic(), time.time())
            if held is not None:
                log.error(
                    "state file write failed",
                    path=str(state_file.path),
                    error=str(exc),
                    held_back=held,
                )
            return
        ended = self.writes.written()
        if ended is not None:
            self.metrics_.state_file_written()
            log.info(
                "state file written again",
                path=str(state_file.path),
                failures=ended.failures,
                after_s=round(time.time() - ended.since, 3),
            )

    def _snapshot(self) -> dict[str, Any]:
        """The status document, versioned (a new version wakes the long-polls)."""
        assert self.elector is not None
        before = self.changes.version
        doc = self.changes.stamp(
            status.document(self.elector.election, time.monotonic(), time.time())
        )
        if doc["version"] != before:  # its time stamp is when the long-polls were woken
            log.debug("status changed", version=doc["version"], leader=doc["leader"])
        return doc

    # -- running ------------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGTERM/SIGINT: step down and exit; drain first unless the app has stopped already
        (``--app-stops-first``: a native sidecar gets its SIGTERM after the app exited)."""
        self._stopping.set()
        if self.elector is not None:
            self.elector.stop(drain=not self.config.app_stops_first)

    async def run(self) -> int:
        """Check the settings, read the election settings, start, elect until stopped, then
        wind down (see the module docstring for the order)."""
        self._preflight()
        if self._probes is not None:  # answering from the start, as --http does
            self._probes.beat(self)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        try:
            election = await self._election_config()
            if election is None:
                return 0  # stopped before the DistributedLock was read
            elector = await self._start(election)
            if self._stopping.is_set():
                elector.stop(drain=not self.config.app_stops_first)
            await elector.run()
            return 0
        finally:
            await self._wind_down()

    def _preflight(self) -> None:
        """Fail fast, before anything runs: a lock name that names no Kubernetes object, a
        state directory that cannot be written or that another sidecar uses (the file name
        waits for the lock name)."""
        cfg = self.config
        if cfg.election is not None and (cfg.lease_mirror or cfg.events):
            cfg.lock_object(cfg.election.lock)
        if cfg.state_dir is not None:  # held (flock) until the process ends: one per dir
            self._state_dir_lock = StateFile(cfg.state_dir, "probe").prepare()

    async def _election_config(self) -> ElectionConfig | None:
        """The election settings: from flags, or (``--lock-ref``) the DistributedLock's first
        read; None if stopped before it. Sets up the Kubernetes client and the pod label."""
        cfg = self.config
        if cfg.lock_ref is not None or cfg.pod_label or cfg.lease_mirror or cfg.events:
            self._kube = KubeClient(required(cfg.kube))
        if cfg.pod_label:
            if not cfg.pod_name or not cfg.namespace:
                raise ConfigError("--pod-label", "needs the POD_NAME and POD_NAMESPACE env vars")
            self.labeller = PodLabeller(self._kube, cfg.namespace, cfg.pod_name)  # type: ignore[arg-type]
        if cfg.lock_ref is None:
            return cfg.election
        assert self._kube is not None
        self.follower = LockRefFollower(self._kube, cfg.lock_ref, cfg.identity, self._reconfigure)
        # serving before the first read: /healthz shows why the lock is not usable yet
        await self._listen_http()
        initial = asyncio.ensure_future(self.follower.initial())
        stopper = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait({initial, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not initial.done():
            initial.cancel()
            return None
        return initial.result()

    async def _start(self, election: ElectionConfig) -> SidecarElector:
        """The outputs named after the lock, the elector, the HTTP ports and the background
        tasks (pod label, DistributedLock follower, Lease mirror, Events)."""
        cfg = self.config
        cfg.check_election(election, "spec.holders" if cfg.lock_ref else sidecar_args.HOLDERS)
        self._kube_views(self._kube, election)
        if cfg.state_dir is not None:
            self.state_file = StateFile(cfg.state_dir, election.lock)
        self.metrics_ = Metrics(election.lock)
        self.elector = SidecarElector(election, hooks=self, drain_timeout=cfg.drain_timeout)
        if self.lockapi is not None:  # the election's nodes, credentials, scope, replicas
            self.lockapi.follow(election)
        if self.follower is None:
            await self._listen_http()
        await self._listen(cfg.metrics, "--metrics", metrics_only=True)
        _log_start(election, cfg)
        for view in (self.labeller, self.follower, self.mirror, self.events):
            if view is not None:
                self._background.append(asyncio.create_task(view.run()))
        return self.elector

    async def _wind_down(self) -> None:
        """Stop the background tasks, then withdraw every output: pod label, Events, Lease
        mirror, the leader marker; answer the long-polls, close the ports and the Kubernetes
        client. The lock API releases the app's leases first."""
        if self.lockapi is not None:
            await self.lockapi.close()
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.labeller is not None:
            self.labeller.set(False)
            await self.labeller.final()
        if self.events is not None:
            await self.events.final()
        if self.mirror is not None:
            await self.mirror.final()
        if self.state_file is not None:
            try:
                self.state_file.remove_marker()
            except OSError as exc:  # its `until` runs out by itself
                log.error("leader marker not removed", error=str(exc))
        self.changes.close()
        for server in self._servers:
            await server.close()
        if self._probes is not None:  # its last verdict runs out; run_sidecar ends it
            self._probes.stop_beat()
        if self._kube is not None:
            await self._kube.close()
        log.info("sidecar stopped", identity=self.config.identity)

    def _kube_views(self, kube: KubeClient | None, election: ElectionConfig) -> None:
        """The Lease mirror and the Events, if asked for (named after the lock)."""
        cfg = self.config
        if kube is None or not (cfg.lease_mirror or cfg.events):
            return
        namespace, name = cfg.lock_object(election.lock)
        timing = election.timing
        if cfg.lease_mirror and self.mirror is None:
            self.mirror = LeaseMirror(kube, namespace, name, timing.retry_period, timing.ttl)
        if cfg.events and self.events is None:
            obj = (involved_lock if cfg.lock_ref is not None else involved_lease)(namespace, name)
            self.events = LeaderEvents(kube, namespace, obj, cfg.pod_name)

    def _reconfigure(self, config: ElectionConfig) -> None:
        if self.elector is not None:
            try:
                self.config.check_election(config, "spec.holders")
            except ConfigError as exc:
                log.error("DistributedLock spec refused, keeping the current settings",
                          error=str(exc))  # fmt: skip
                return
            self.elector.reconfigure(config)
            if self.lockapi is not None:  # one configuration: the API switches with it
                self.lockapi.follow(config)

    async def _listen_http(self) -> None:
        """``--http`` (the probe-only ``--probes`` answers from the start: :func:`run_sidecar`)."""
        await self._listen(self.config.http)

    async def _listen(
        self, address: HttpAddress | None, flag: str = "--http", metrics_only: bool = False
    ) -> None:
        """Serve the endpoints on ``address`` (if given) until :meth:`_wind_down`."""
        if address is None:
            return
        try:
            more = None if metrics_only else api_routes(self.lockapi, self.dapr,
                                                        self.config.api_token)  # fmt: skip
            server = await serve(
                self, address.host, address.port, metrics_only=metrics_only, more=more
            )
        except OSError as exc:
            raise ConfigError(flag, f"cannot listen on {address}: {exc.strerror}") from None
        self._servers.append(server)


def _log_start(election: ElectionConfig, cfg: SidecarConfig) -> None:
    log.info(
        "sidecar started",
        lock=election.lock,
        redis_lock=election.redis_lock,
        identity=election.identity,
        redis=[redact(u) for u in election.target.urls],
        ttl=election.timing.ttl,
        renew_deadline=election.timing.renew_deadline,
        retry_period=election.timing.retry_period,
        http=str(cfg.http) if cfg.http else None,
        metrics=str(cfg.metrics) if cfg.metrics else None,
        state_dir=str(cfg.state_dir) if cfg.state_dir else None,
        lock_ref=str(cfg.lock_ref) if cfg.lock_ref else None,
        pod_label=cfg.pod_label,
        lease_mirror=cfg.lease_mirror,
        events=cfg.events,
        api_locks=cfg.api_locks,
        drain_timeout=cfg.drain_timeout,
    )


def run_sidecar(config: SidecarConfig) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code. ``--probes`` is served by a process
    forked first, while this one has no event loop nor thread yet (:mod:`.probes`), and ended
    last."""
    probes = None
    if config.probes is not None:
        address = config.probes
        try:
            probes = ProbeProcess.start(address.host, address.port)
        except OSError as exc:
            raise ConfigError(sidecar_args.PROBES, f"cannot listen on {address}: {exc}") from None
    try:
        return asyncio.run(Sidecar(config, probes).run())
    finally:
        if probes is not None:
            probes.close()
