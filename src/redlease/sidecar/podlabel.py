"""The leader label on the sidecar's own pod: ``redlease.dev/leader=true|false``.

A Service or a NetworkPolicy selects the leader by it; the label follows the election with
retries and back-off, and is set ``false`` on shutdown (best effort).
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from redlease.errors import KubeError
from redlease.kube.client import KubeClient
from redlease.kube.names import LEADER_LABEL
from redlease.kube.verbs import patch

log = structlog.get_logger("redlease.sidecar")


class PodLabeller:
    """Keeps ``redlease.dev/leader=true|false`` on the sidecar's own pod, retrying on errors."""

    def __init__(self, client: KubeClient, namespace: str, pod: str) -> None:
        self.client = client
        self.namespace = namespace
        self.pod = pod
        self.desired: bool | None = None
        self.applied: bool | None = None
        self._wake = asyncio.Event()

    def set(self, leader: bool) -> None:
        if leader != self.desired:
            self.desired = leader
            self._wake.set()

    async def _patch(self, leader: bool) -> None:
        body = {"metadata": {"labels": {LEADER_LABEL: "true" if leader else "false"}}}
        await patch.pod(self.client, self.namespace, self.pod, body, timeout=5.0)

    async def run(self) -> None:
        delay = 0.5
        while True:
            await self._wake.wait()
            self._wake.clear()
            desired = self.desired
            if desired is None or desired == self.applied:
                continue
            try:
                await self._patch(desired)
            except KubeError as exc:
                log.warning("pod label update failed", pod=self.pod, error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                self._wake.set()
                continue
            delay = 0.5
            self.applied = desired
            log.info("pod label set", pod=self.pod, label=LEADER_LABEL, value=desired)

    async def final(self, timeout: float = 2.0) -> None:
        """On shutdown: label the pod ``false`` (best effort, bounded)."""
        if self.applied is False:
            return
        with contextlib.suppress(KubeError, TimeoutError):
            async with asyncio.timeout(timeout):
                await self._patch(False)
                self.applied = False
