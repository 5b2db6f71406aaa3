"""The lock API's HTTP edges (docs/lockapi.md): a request body read within its cap, a handler's
dict or :class:`~redlease.sidecar.lockanswers.ApiError` as the JSON answer, and an acquire that
ends when the waiting client goes away (499)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from redlease.core.lease import Lease
from redlease.errors import LockError
from redlease.sidecar.lockanswers import MAX_BODY, ApiError


async def read_capped(request: web.Request, cap: int = MAX_BODY) -> bytes:
    """The body, or 413 past ``cap`` bytes (whether or not a Content-Length says so). The
    port's guard has read it already, within its deadline (``ConnectionGuard.read_body``)."""
    if request.content_length is not None and request.content_length > cap:
        raise ApiError(413, f"the body is over {cap} bytes", field="body")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"the body is over {cap} bytes", field="body") from None
    if len(raw) > cap:
        raise ApiError(413, f"the body is over {cap} bytes", field="body")
    return raw


Handler = Callable[[web.Request], Awaitable[web.Response]]


def answering(handler: Callable[[web.Request], Awaitable[dict[str, Any]]]) -> Handler:
    """``handler``'s dict as a 200 JSON answer, an :class:`ApiError` as its status."""

    async def answer(request: web.Request) -> web.Response:
        try:
            return web.json_response(await handler(request))
        except ApiError as exc:
            return web.json_response(exc.body, status=exc.status, headers=exc.headers)

    return answer


async def unless(gone: asyncio.Event | None, acquire: Awaitable[Lease]) -> Lease:
    """``acquire``'s lease, unless ``gone`` is set first: then the acquire is cancelled (the
    library leaves no lease nor queue place behind) and 499 raised."""
    task = asyncio.ensure_future(acquire)
    if gone is None:
        return await task
    stop = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, LockError):
                await task
    if task.cancelled():
        raise ApiError(499, "the client closed the connection while waiting")
    return task.result()


__all__ = ["Handler", "answering", "read_capped", "unless"]
