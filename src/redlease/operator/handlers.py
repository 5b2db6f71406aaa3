"""The kopf side: thin handlers over :mod:`reconcile` and :mod:`reader`.

One kopf timer per DistributedLock does everything (validation, force release, status, events),
so the operator keeps no change-detection annotations on the objects. The timer parks in
:class:`Refresher` until the next cycle; the cycle reads every lock at once.

Finalizer policy: kopf puts its finalizer on each object only to stop that object's timer
cleanly. A delete never touches Redis (the lease, its holder and the fence counter stay), and the
finalizer is removed as soon as the timer has stopped. See docs/operator.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf

from redlease.errors import ConfigError
from redlease.kube.client import KubeClient
from redlease.kube.kubeconfig import ClusterAuth
from redlease.kube.leaselock import ElectionConfig
from redlease.kube.spec import (
    FORCE_RELEASE_ANNOTATION,
    GROUP,
    PLURAL,
    VERSION,
    Credentials,
    LockSpec,
    parse_spec,
)
from redlease.operator import apifaults, metrics, ports, reconcile, webhook
from redlease.operator.events import EventPoster
from redlease.operator.reader import NodeReader
from redlease.operator.refresher import Refresher
from redlease.operator.secrets import SecretSource

log = logging.getLogger("redlease.operator")
FINALIZER = "redlease.dev/operator"


@dataclass(frozen=True, slots=True)
class OperatorConfig:
    """Validated settings of ``redlease operator`` (the CLI builds it)."""

    namespaces: tuple[str, ...] = ()
    clusterwide: bool = False
    liveness: str | None = None
    refresh: float = 5.0
    concurrency: int = 16
    node_timeout: float = 3.0
    verbose: bool = False
    metrics: tuple[str, int] | None = None  # (host, port) of /metrics; None: not served
    webhook: webhook.WebhookConfig | None = None  # sidecar injection; None: not served
    election: ElectionConfig | None = None  # several replicas, one active; None: just one
    kube: ClusterAuth | None = None  # the API server and credentials (kopf's login too)


def api_client(config: OperatorConfig) -> KubeClient:
    """The operator's Kubernetes API client (the Secret, Namespace, DistributedLock and Lease
    reads and writes that are not kopf's own)."""
    if config.kube is None:
        raise ConfigError("KUBECONFIG", "no Kubernetes API configured")
    return KubeClient(config.kube)


def _always() -> bool:
    return True


class Runtime:
    """What the handlers share: the node reader, the cycle batcher and the secret source.

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
        self.failures = 0  # reconcile ticks that failed (kopf retries them)
        self.reader = NodeReader(concurrency=config.concurrency, timeout=config.node_timeout)
        self.refresher = Refresher(self.reader.read, config.refresh)
        kube = secrets.kube if secrets is not None else api_client(config)
        self.secrets = secrets or SecretSource(kube)
        self.locks = locks or webhook.LockSource(kube, timeout=lock_timeout(config))
        self.written: dict[str, dict[str, Any]] = {}  # uid -> the status we last wrote
        self.names: dict[str, tuple[str, str]] = {}  # uid -> (namespace, name)
        self.seen: dict[str, float] = {}  # uid -> monotonic time of its last timer tick
        self.released: dict[str, str] = {}  # uid -> force-release annotation already acted on
        self.events = EventPoster()
        self._next_forget = 0.0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._metrics: Any = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = self._loop.create_task(self.refresher.run())
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
        await self.events.aclose()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.reader.aclose()
        await close_clients(self.locks, self.secrets)

    def health(self) -> dict[str, Any]:
        if self._task is None or self._task.done() or self.refresher.stale():
            raise kopf.PermanentError("the refresh loop is not running")
        return {"cycles": self.refresher.cycles, "locks": self.refresher.last_cycle_size}

    async def credentials(self, spec: LockSpec, namespace: str) -> Credentials | None:
        if spec.secret_ref is None:
            return None
        return await self.secrets.get(namespace, spec.secret_ref, spec.target.urls)

    async def reconcile(
        self,
        body: kopf.Body,
        patch: Any,
    ) -> None:
        """One timer tick for one object: validate, force-release if asked, observe, write.
        Only the active replica does anything (the gate is checked again before writing)."""
        if not self.leading():
            await asyncio.sleep(self.config.refresh)
            return
        meta = body.get("metadata", {})
        uid = str(meta.get("uid") or meta.get("name"))
        namespace = str(meta.get("namespace") or "default")
        generation = meta.get("generation")
        previous = self.written.get(uid)
        if previous is None:
            previous = copy.deepcopy(dict(body.get("status") or {}))
        invalid: ConfigError | None = None
        try:
            spec = await self.secrets.with_tls(parse_spec(body.get("spec")), namespace)
            spec = await self.secrets.scoped(spec, namespace)
            creds = await self.credentials(spec, namespace)
        except ConfigError as exc:
            invalid = exc
            new = reconcile.invalid_status(
                exc, generation=generation, previous=previous, now=time.time()
            )
        else:
            request = (meta.get("annotations") or {}).get(FORCE_RELEASE_ANNOTATION)
            if request is None:
                self.released.pop(uid, None)
            elif self.released.get(uid) != request and await self._force_release(
                body, spec, creds, patch
            ):
                self.released[uid] = request  # done; skip it until its removal is seen
            view, read_at = await self.refresher.observe(spec, creds)
            new = reconcile.compute_status(
                spec,
                view,
                read_at=read_at,
                generation=generation,
                previous=previous,
                now=time.time(),
            )
        diff = reconcile.status_patch(previous, new, now=time.time(), refresh=self.config.refresh)
        if not self.leading():
            return  # the lease was lost while reading: the next active replica writes
        for event in reconcile.decide_events(previous, new, invalid):
            self.events.post(body, type=event.type, reason=event.reason, message=event.message)
            # Our own logger: kopf's per-object logger is quiet unless --verbose (see runner).
            log.log(
                logging.WARNING if event.type == reconcile.WARNING else logging.INFO,
                "%s/%s %s: %s",
                namespace,
                meta.get("name"),
                event.reason,
                event.message,
            )
        if diff is not None:
            for key, value in diff.items():
                patch.status[key] = value
            self.written[uid] = new
        elif invalid is not None:
            await asyncio.sleep(self.config.refresh)  # nothing to wait for: keep the cadence
        self.names[uid] = (namespace, str(meta.get("name")))
        self.seen[uid] = time.monotonic()
        self._forget_deleted()

    def _forget_deleted(self) -> None:
        """Drop memory of objects whose timer stopped (deleted): no kopf delete handler is
        needed for that, so kopf keeps no change-tracking annotations on the objects."""
        now = time.monotonic()
        if now < self._next_forget:
            return
        horizon = max(10 * self.config.refresh, 60.0)
        self._next_forget = now + horizon
        for uid in [u for u, t in self.seen.items() if now - t > horizon]:
            self.seen.pop(uid, None)
            self.written.pop(uid, None)
            self.names.pop(uid, None)
            self.released.pop(uid, None)

    async def _force_release(
        self,
        body: kopf.Body,
        spec: LockSpec,
        creds: Credentials | None,
        patch: Any,
    ) -> bool:
        """Force-release on every node; True (and the annotation cleared) once a quorum did."""
        value = (body.get("metadata", {}).get("annotations") or {}).get(FORCE_RELEASE_ANNOTATION)
        holder = (body.get("status") or {}).get("holder")
        results = await self.reader.force_release(spec, creds)
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
        self.events.post(body, type=reconcile.WARNING, reason="ForceReleased", message=message)
        meta = body.get("metadata", {})
        log.warning("%s/%s ForceReleased: %s", meta.get("namespace"), meta.get("name"), message)
        if done < spec.quorum:
            return False  # keep the annotation: retried next cycle
        patch.metadata.setdefault("annotations", {})[FORCE_RELEASE_ANNOTATION] = None
        return True


def operator_settings(
    config: OperatorConfig | None = None, *, webhook_server: bool = True
) -> kopf.OperatorSettings:
    """kopf settings: no cluster-wide scanning (least privilege), our own finalizer name, and the
    injection webhook's HTTPS server when ``config`` asks for it (and ``webhook_server``).
    Every kopf that runs with them rides out API server faults the same way (:mod:`.apifaults`)."""
    settings = kopf.OperatorSettings()
    apifaults.harden(settings)
    if webhook_server and config is not None and config.webhook is not None:
        settings.admission.server = webhook.server(config.webhook)
    # Serve exactly the namespaces given (no list/watch on namespaces or CRDs needed); the CRD
    # must exist when the operator starts (the Helm chart installs it first).
    settings.scanning.disabled = True
    settings.persistence.finalizer = FINALIZER
    settings.posting.level = logging.INFO
    return settings


def lock_timeout(config: OperatorConfig) -> float:
    """Seconds for the webhook's DistributedLock GET."""
    return config.webhook.lock_timeout if config.webhook else 2.0


async def close_clients(locks: webhook.LockSource, secrets: SecretSource) -> None:
    """Close the connections this loop opened (a kopf stopping in its thread)."""
    await locks.kube.close()
    await secrets.kube.close()


def connection_info(auth: ClusterAuth) -> kopf.ConnectionInfo:
    """kopf's login from the operator's own credentials: one source for kopf and the API
    client. kopf logs in again after an HTTP 401, which reads a rotated token."""
    return kopf.ConnectionInfo(
        server=auth.base_url(),
        ca_path=auth.ca_file,
        ca_data=auth.ca_data,
        insecure=auth.insecure,
        token=auth.current_token(),
        certificate_path=auth.cert_file,
        certificate_data=auth.cert_data,
        private_key_path=auth.key_file,
        private_key_data=auth.key_data,
        default_namespace=auth.namespace,
    )


def client_login(registry: kopf.OperatorRegistry, auth: ClusterAuth | None) -> None:
    """Log kopf in with ``auth`` (in-cluster service account or a kubeconfig's context, as
    the command line found it)."""
    if auth is None:
        return

    @kopf.on.login(registry=registry, id="login")
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(auth)


def serving_registry(
    config: OperatorConfig,
    health: Callable[[], dict[str, Any]],
    locks: webhook.LockSource,
    secrets: SecretSource,
) -> kopf.OperatorRegistry:
    """What every replica serves, active or standby: the injection webhook (stateless) and the
    liveness probe. It has no DistributedLock handler, so it watches and writes nothing."""
    reg = kopf.OperatorRegistry()
    client_login(reg, config.kube)
    if config.webhook is not None:
        webhook.register(reg, config.webhook, locks, secrets)

    @kopf.on.cleanup(registry=reg, id="redlease-cleanup")
    async def cleanup(**_: Any) -> None:
        await close_clients(locks, secrets)

    if config.liveness:
        ports.liveness(reg, config.liveness, health)
    return reg


def build_registry(
    runtime: Runtime,
    registry: kopf.OperatorRegistry | None = None,
    *,
    serving: bool = True,
) -> kopf.OperatorRegistry:
    """A registry with the operator's handlers (explicit ids; a fresh one per operator).
    ``serving=False`` leaves out the webhook and the probe (:func:`serving_registry` has them:
    with leader election only the active replica runs this registry)."""
    reg = registry if registry is not None else kopf.OperatorRegistry()
    if registry is None:
        client_login(reg, runtime.config.kube)
    config = runtime.config
    if serving and config.webhook is not None:
        webhook.register(reg, config.webhook, runtime.locks, runtime.secrets)

    if serving and config.liveness:
        ports.liveness(reg, config.liveness, runtime.health)

    @kopf.on.startup(registry=reg, id="redlease-startup")
    async def startup(**_: Any) -> None:
        await runtime.start()

    @kopf.on.cleanup(registry=reg, id="redlease-cleanup")
    async def cleanup(**_: Any) -> None:
        await runtime.stop()

    @kopf.timer(
        GROUP,
        VERSION,
        PLURAL,
        registry=reg,
        id="refresh",
        interval=min(0.1, config.refresh / 10),
        backoff=config.refresh,
    )
    async def refresh(body: Any, patch: Any, **kwargs: Any) -> None:
        # Waiting for the next cycle must not delay shutdown or deletion: race it with `stopped`.
        work = asyncio.ensure_future(runtime.reconcile(body, patch))
        stop = asyncio.ensure_future(kwargs["stopped"].wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, stop):
                if not task.done():
                    task.cancel()
        if work.done() and not work.cancelled() and work.exception() is not None:
            runtime.failures += 1
            work.result()  # re-raise a failure for kopf's retry/backoff

    return reg
