"""Run the operator: one kopf, or (with leader election) a serving kopf on every replica and a
reconciling kopf on the active one.

With leader election (:mod:`.leadership`) the process has three parts:

* the main thread's loop runs the :class:`~.leadership.LeaseElector`, the signal handlers and
  ``--metrics`` (so a standby is scraped too, with ``redlease_operator_leader 0``);
* a *serving* kopf (its own thread and loop) runs on every replica: the injection webhook,
  which is stateless, and the liveness endpoint. It has no DistributedLock handler, so it
  watches and writes nothing;
* a *reconciling* kopf (its own thread and loop, a fresh :class:`~.runtime.Runtime` each
  term) runs only while this replica holds the Lease; it is stopped when the Lease is lost.

Separate loops keep the Lease renewals independent of the reconcile work, and no kopf installs
signal handlers (only the main thread may). Every write of the reconciling kopf is gated on the
Lease's renew deadline too, so a replica that stops leading writes nothing more even before
its kopf has stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from typing import Any

from redlease.operator.config import OperatorConfig
from redlease.operator.handlers import build_registry, operator_settings, serving_registry
from redlease.operator.runtime import Runtime

log = logging.getLogger("redlease.operator")


def run_operator(config: OperatorConfig) -> int:
    """Block running the operator until SIGTERM/SIGINT; returns the exit status. Logging is the
    command's (:func:`redlease.cli.logs.configure`): kopf's records go through the same handler
    and format as redlease's, so kopf's own log set-up (``kopf.configure``) is not used."""
    import kopf

    if not config.verbose:
        # One "Timer succeeded" line per lock per refresh would drown everything else.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if config.election is not None:
        # kopf runs in threads here on purpose (the main thread handles the signals)
        logging.getLogger("kopf._core.reactor.running").addFilter(_NotInMainThread())
        return asyncio.run(run_replica(config))
    runtime = Runtime(config)
    registry = build_registry(runtime)
    kopf.run(
        registry=registry,
        settings=operator_settings(config),
        standalone=True,
        clusterwide=config.clusterwide,
        namespaces=list(config.namespaces),
    )
    return 0


class _NotInMainThread(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "not in the main thread" not in record.getMessage()


class KopfThread:
    """One kopf operator in its own thread and event loop, stopped through its stop flag."""

    def __init__(
        self,
        name: str,
        registry: Any,
        settings: Any,
        config: OperatorConfig,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.config = config
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        import kopf

        try:
            asyncio.run(
                kopf.operator(
                    registry=self.registry,
                    settings=self.settings,
                    standalone=True,
                    clusterwide=self.config.clusterwide,
                    namespaces=list(self.config.namespaces),
                    stop_flag=self.stop_flag,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - reported by health()
            self.error = exc
            log.error("%s stopped: %s: %s", self.thread.name, type(exc).__name__, exc)

    def start(self) -> KopfThread:
        self.thread.start()
        return self

    def alive(self) -> bool:
        return self.thread.is_alive()

    async def stop(self, timeout: float = 30.0) -> None:
        self.stop_flag.set()
        await asyncio.to_thread(self.thread.join, timeout)
        if self.thread.is_alive():
            log.error("%s did not stop within %gs", self.thread.name, timeout)


class Replica:
    """One operator replica under leader election (see the module docstring)."""

    def __init__(self, config: OperatorConfig) -> None:
        from redlease.operator.config import api_client, lock_timeout
        from redlease.operator.leadership import LeaseElector
        from redlease.operator.secrets import SecretSource
        from redlease.operator.webhook import LockSource

        assert config.election is not None
        self.config = config
        election = config.election
        self.kube = api_client(config)
        self.elector = LeaseElector(election, self.kube, self._started, self._stopped)
        self.secrets = SecretSource(self.kube)
        self.locks = LockSource(self.kube, timeout=lock_timeout(config))
        self.term: tuple[Runtime, KopfThread] | None = None
        self.serving: KopfThread | None = None
        self._elector_task: asyncio.Task[None] | None = None

    async def _started(self) -> None:
        runtime = Runtime(
            self.config,
            self.secrets,
            self.locks,
            leading=self.elector.leading,
            serve_metrics=False,
        )
        registry = build_registry(runtime, serving=False)
        settings = operator_settings(self.config, webhook_server=False)
        self.term = runtime, KopfThread("kopf-reconcile", registry, settings, self.config).start()
        log.info("active: reconciling DistributedLocks")

    async def _stopped(self) -> None:
        term, self.term = self.term, None
        if term is not None:
            await term[1].stop()
            log.info("standby: stopped reconciling")

    def health(self) -> dict[str, Any]:
        import kopf

        task = self._elector_task
        if task is None or task.done():
            raise kopf.PermanentError("the leader election is not running")
        term = self.term
        out: dict[str, Any] = {"leader": self.elector.is_leader}
        if term is not None:
            runtime, thread = term
            if not thread.alive():
                raise kopf.PermanentError("the reconciling operator stopped")
            out.update(runtime.health())
        return out

    def metrics_text(self) -> str:
        from redlease.operator import metrics

        term = self.term
        if term is not None:
            return term[0].metrics_text(leader=self.elector.leading())
        return metrics.render(
            cycles=0, locks=0, round_trips=0, statuses=[], interval=self.config.refresh,
            leader=False,
        )  # fmt: skip

    async def run(self) -> int:
        from redlease.operator import ports

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = None
        if self.config.metrics is not None:
            server = await ports.serve_metrics(*self.config.metrics, self.metrics_text)
        registry = serving_registry(self.config, self.health, self.locks, self.secrets)
        self.serving = KopfThread(
            "kopf-serve", registry, operator_settings(self.config), self.config
        ).start()
        election = self.config.election
        assert election is not None
        log.info(
            "replica %s: operator lease %s/%s (duration %gs, renew deadline %gs, retry %gs)",
            election.identity,
            election.namespace,
            election.name,
            election.timing.ttl,
            election.timing.renew_deadline,
            election.timing.retry_period,
        )
        self._elector_task = asyncio.create_task(self.elector.run(stop))
        try:
            await self._elector_task  # returns after stop: reconciling stopped, Lease released
        finally:
            await self._stopped()
            await self.serving.stop()
            if server is not None:
                await server.close()
            await self.kube.close()
        return 0


async def run_replica(config: OperatorConfig) -> int:
    replica = Replica(config)
    with contextlib.suppress(asyncio.CancelledError):
        return await replica.run()
    return 0
