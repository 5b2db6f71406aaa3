"""Small test helpers: deadline polling instead of sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.005) -> None:
    """Poll ``predicate`` until true; fail the test at ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(step)


async def async_wait_until(
    predicate: Callable[[], Awaitable[bool]], timeout: float = 10.0, step: float = 0.005
) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(step)
