"""Follows a DistributedLock (``--lock-ref``): its spec and Secrets, read into election settings.

The lock is made connectable by :mod:`redlease.kube.resolver`, the rule the operator uses (the
spec's parser, its Namespace's key scope, its Secrets); the object is watched and re-read on
every change and every resync.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import structlog

from redlease.core.urls import Consent, consent_names, redact
from redlease.errors import ConfigError, KubeError
from redlease.kube.client import KubeClient
from redlease.kube.resolver import ApiReads, connectable, scoped_spec
from redlease.kube.secretspec import Credentials
from redlease.kube.spec import LockSpec
from redlease.kube.verbs import get, watch
from redlease.sidecar.config import ElectionConfig, LockRef, election_from_spec

log = structlog.get_logger("redlease.sidecar")


class LockRefFollower:
    """Reads a DistributedLock (and its Secret) into election settings and follows changes.

    The lock is resolved by :mod:`redlease.kube.resolver`, as the operator resolves it;
    ``identity`` is this pod's own. Credentials given with the reference
    (``--username``/``--password``, i.e. ``REDLEASE_USERNAME``/``REDLEASE_PASSWORD``, which an
    injected pod takes from the Secret) are used as they are; only without them is the Secret
    named by ``spec.auth.secretRef`` read through the API (the same for TLS files and the Secrets
    of ``spec.tls``).

    Pinned nodes: the injector checked the Secrets' consent for the lock's nodes at admission
    and wrote those URLs into the pod (``--pinned-node``, :attr:`LockRef.pinned_nodes`); a spec
    naming any other node set is refused before anything connects, from the first read and
    after every restart. Credentials given without a pin are pinned to the nodes of the first
    read. ``problem`` is the latest refusal (shown by ``/healthz``), None once a read passes."""

    def __init__(
        self,
        client: KubeClient,
        ref: LockRef,
        identity: str,
        on_config: Callable[[ElectionConfig], None],
        resync: float = 30.0,
    ) -> None:
        self.client = client
        self.reads = ApiReads(client)
        self.ref = ref
        self.identity = identity
        self.on_config = on_config
        self.resync = resync
        self.spec_read: Any = None  # the spec last read in full (with its Namespace, Secrets)
        self.pinned_nodes: frozenset[str] | None = ref.pinned_nodes
        self.problem: str | None = None

    async def read(self, obj: dict[str, Any] | None = None) -> ElectionConfig:
        """The settings the object's spec asks for (reads the object unless given)."""
        try:
            config = await self._read(obj)
        except (KubeError, ConfigError) as exc:
            self.problem = str(exc)
            raise
        self.problem = None
        return config

    async def _read(self, obj: dict[str, Any] | None) -> ElectionConfig:
        namespace = self.ref.namespace
        if obj is None:
            obj = await get.lock(self.client, namespace, self.ref.name)
        if not isinstance(obj, dict):
            raise KubeError(f"DistributedLock {self.ref}: the API answered {obj!r}")
        spec = await scoped_spec(obj.get("spec"), namespace, self.reads)
        credentials = self._given_credentials(spec)
        given_tls = self.ref.tls
        if self.pinned_nodes is None and (
            credentials is not None or (given_tls is not None and given_tls.client_certificate)
        ):
            self.pinned_nodes = frozenset(spec.target.urls)
        self._check_pinned(spec)
        lock = await connectable(
            spec, namespace, self.reads, credentials=credentials, tls=given_tls
        )
        config = election_from_spec(
            lock.spec, self.identity, lock.credentials, self.ref.replica_timeout
        )
        self.spec_read = copy.deepcopy(obj.get("spec"))
        return config

    def _given_credentials(self, spec: LockSpec) -> Credentials | None:
        """The credentials given with the reference; with ``--allowed-master``, kept to the
        lock's nodes and those masters (a Sentinel naming another master gets nothing)."""
        given = self.ref.credentials
        if given is None or not self.ref.allowed_masters:
            return given
        names = frozenset().union(*map(consent_names, spec.target.urls))
        consent = Consent(names | self.ref.allowed_masters)
        return dataclasses.replace(given, consent=consent)

    def _check_pinned(self, spec: LockSpec) -> None:
        pinned = self.pinned_nodes
        urls = frozenset(spec.target.urls)
        if pinned is None or urls == pinned:
            return
        new = sorted(map(redact, urls - pinned))
        raise ConfigError(
            "spec.nodes",
            f"the lock names {sorted(map(redact, urls))} but this sidecar is pinned to "
            f"{sorted(map(redact, pinned))} (the nodes its Secrets were admitted for): not "
            "connecting"
            + (f", not sending its credentials to {new}" if new else "")
            + "; re-create the pod to use other nodes",
        )

    async def initial(self) -> ElectionConfig:
        """Read the object, retrying with back-off until it exists and its spec is valid."""
        delay = 0.5
        while True:
            try:
                return await self.read()
            except (KubeError, ConfigError) as exc:
                log.warning(
                    "cannot use DistributedLock yet, retrying",
                    lock_ref=str(self.ref),
                    error=str(exc),
                    retry_in=delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def run(self) -> None:
        """Watch the object; re-read it (and its Secret) on every change and every ``resync``."""
        delay = 0.5
        while True:
            try:
                await self._apply(None)
                ref = self.ref
                async for event in watch.lock(self.client, ref.namespace, ref.name, self.resync):
                    obj = event.get("object") or {}
                    if (obj.get("metadata") or {}).get("name") != self.ref.name:
                        continue
                    if event.get("type") in ("ADDED", "MODIFIED") and not self._unchanged(obj):
                        await self._apply(obj)
                delay = 0.5
            except TimeoutError:
                delay = 0.5
            except (KubeError, ConfigError) as exc:
                log.warning("DistributedLock not followed", lock_ref=str(self.ref), error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    def _unchanged(self, obj: dict[str, Any]) -> bool:
        """Whether ``obj`` carries the spec last read in full. The operator writes the status
        at every change of the lock's state, and the watch starts with the object as it
        stands: re-reading the Namespace and the Secrets for each cost one API read per pod
        per status write. The spec itself is compared, not ``metadata.generation`` (an API
        server bumps it on spec changes, but not every emulator does); the Namespace and the
        Secrets are read again at every ``resync`` anyway."""
        return self.spec_read is not None and obj.get("spec") == self.spec_read

    async def _apply(self, obj: dict[str, Any] | None) -> None:
        try:
            config = await self.read(obj)
        except ConfigError as exc:
            log.error("DistributedLock spec invalid, keeping the current settings", error=str(exc))
            return
        self.on_config(config)
