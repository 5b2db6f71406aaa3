"""Relist when the API server answers a watch request with HTTP 410 Gone.

A watch resumed from a resourceVersion the API server no longer has ends with 410 Gone, either
as an ERROR event inside the stream or as the HTTP status of the watch request itself. kopf
relists on the first; the second fails its watcher, which stops the whole operator (found by
tests/operator/test_api_faults.py). :func:`install` wraps kopf's watch request so that an HTTP
410 becomes the in-stream ERROR event: kopf then relists and watches again, as client-go does.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger("redlease.operator")
GONE = 410
_INSTALLED = "_redlease_relists_http_gone"


def install() -> bool:
    """Wrap kopf's ``watch_objs`` once per process; False (and a warning) if kopf has none."""
    from redlease.operator import kopfint

    watching = kopfint.watch_module()
    original = getattr(watching, "watch_objs", None)
    if original is None:
        log.warning("kopf has no watch_objs: an HTTP 410 on a watch stops the operator")
        return False
    if getattr(original, _INSTALLED, False):
        return True

    async def watch_objs(**kwargs: Any) -> AsyncIterator[Any]:
        try:
            async for event in original(**kwargs):
                yield event
        except kopfint.APIClientError as exc:
            if exc.status != GONE:
                raise
            log.info("the watch of %s is gone (HTTP 410): relisting", kwargs.get("resource"))
            yield {"type": "ERROR", "object": {"kind": "Status", "code": GONE, "message": str(exc)}}

    setattr(watch_objs, _INSTALLED, True)  # noqa: B010 - a marker on a function
    watching.watch_objs = watch_objs
    return True
