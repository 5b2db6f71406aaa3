"""The kopf side: kopf's settings and login, and thin handlers over :class:`.runtime.Runtime`.

Finalizer policy: kopf puts its finalizer on each object only to stop that object's daemon
cleanly. A delete never touches Redis (the lease, its holder and the fence counter stay), and the
finalizer is removed as soon as the daemon has stopped. See docs/operator.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import kopf

from redlease.kube.auth import Login
from redlease.kube.names import GROUP, PLURAL, VERSION
from redlease.operator import apifaults, ports, webhook
from redlease.operator.config import OperatorConfig
from redlease.operator.runtime import Runtime, close_clients
from redlease.operator.secrets import SecretSource

FINALIZER = "redlease.dev/operator"


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


def connection_info(login: Login) -> kopf.ConnectionInfo:
    """kopf's login from the operator's own credentials: one source for kopf and the API
    client. kopf logs in again after an HTTP 401 (a rotated token file is read again) and when
    the credentials expire (an exec plugin's token: loaded again before its expiry)."""
    auth = login.snapshot()
    return kopf.ConnectionInfo(
        server=auth.base_url(),
        ca_path=auth.ca_file,
        ca_data=auth.ca_data,
        insecure=auth.insecure,
        scheme=auth.scheme if auth.token else None,
        token=auth.token,
        expiration=auth.expires,
        certificate_path=auth.cert_file,
        certificate_data=auth.cert_data,
        private_key_path=auth.key_file,
        private_key_data=auth.key_data,
        default_namespace=auth.namespace,
    )


def client_login(registry: kopf.OperatorRegistry, auth: Login | None) -> None:
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

    @kopf.daemon(GROUP, VERSION, PLURAL, registry=reg, id="refresh")
    async def refresh(body: kopf.Body, meta: Any, stopped: Any, **_: Any) -> None:
        # Idle: the refresh loop reads kopf's live body; stopping (a delete) ends the tracking.
        uid = str(meta.get("uid") or meta.get("name"))
        runtime.track(uid, body)
        try:
            await stopped.wait()
        finally:
            runtime.untrack(uid)

    return reg
