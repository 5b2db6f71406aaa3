"""Events posted once, even when the API server's answer is lost.

kopf posts an Event with ``generateName``: when the connection breaks after the API server
stored it, kopf's retry stores it a second time (found by tests/operator/test_api_faults.py).
Here each Event gets its name when the operator decides it (``kube.events.event_body``), so a
retried POST is answered 409 AlreadyExists, which counts as posted. One object's Events are
posted in the order they were decided, and retried for as long as the API server is away
(:class:`.apifaults.EndlessBackoff`). At most ``limit`` POSTs are in flight at once: a cycle
that changes thousands of locks opens no more API connections than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from redlease.kube.events import event_body
from redlease.operator.apifaults import EndlessBackoff

log = logging.getLogger("redlease.operator")


class EventPoster:
    """Post Events of kopf-handled objects in the background (see the module docstring)."""

    def __init__(self, limit: int = 16) -> None:
        self._tails: dict[str, asyncio.Task[None]] = {}  # object uid -> its last posting
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None

    def post(self, body: Any, *, type: str, reason: str, message: str) -> None:
        """Queue an Event about ``body``; call it from a kopf handler (it uses kopf's login)."""
        from redlease.operator import kopfint

        ref = kopfint.object_reference(body)
        ref.setdefault("namespace", "default")
        posting = kopfint.posting_settings().posting
        payload = event_body(
            ref,
            type=type,
            reason=reason,
            message=message,
            component=posting.reporting_component,
            instance=posting.reporting_instance,
        )
        key = str(ref.get("uid") or ref.get("name"))
        previous = self._tails.get(key)
        task = asyncio.get_running_loop().create_task(self._post(previous, payload))
        self._tails[key] = task
        task.add_done_callback(lambda t: self._forget(key, t))

    def _forget(self, key: str, task: asyncio.Task[None]) -> None:
        if self._tails.get(key) is task:
            del self._tails[key]

    async def _post(self, previous: asyncio.Task[None] | None, payload: dict[str, Any]) -> None:
        import aiohttp

        from redlease.operator import kopfint

        if previous is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(previous)  # in order (a posting never raises: see below)
        url = kopfint.events_url(payload["metadata"]["namespace"])
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        try:
            async with self._slots:
                await kopfint.post(url, payload, log, EndlessBackoff())
        except kopfint.APIConflictError:
            pass  # stored already: the answer to an earlier attempt was lost
        except (kopfint.APIError, aiohttp.ClientError) as exc:
            log.warning("Event %s not posted: %s", payload["reason"], exc)
        except Exception as exc:  # noqa: BLE001 - an Event is auxiliary: log, never fail
            log.warning("Event %s not posted: %s: %s", payload["reason"], type(exc).__name__, exc)

    async def aclose(self) -> None:
        """Stop posting (the operator is stopping)."""
        tasks = list(self._tails.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
