"""The handle kinds built on :class:`~redlease.core.handles.HandleCore` beside the plain lock
(pure: no I/O here): a counting semaphore's constructor and the read-write pair that hands out
reader and writer handles. :mod:`~redlease.core.locks` and :mod:`~redlease.core.aio` subclass
them with their flavour's handle classes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from redlease.core import primitives
from redlease.core.arguments import checked_keywords
from redlease.core.handles import HandleCore
from redlease.core.timing import DEFAULT_TTL


class SemaphoreCore(HandleCore):
    """A counting semaphore's constructor (both flavours): ``limit`` holders at once."""

    counting = True
    public = "Semaphore"

    @checked_keywords
    def __init__(
        self,
        client: Any,
        name: Any,
        limit: int,
        *,
        ttl: float = DEFAULT_TTL,
        identity: str | None = None,
        handoff: float = 0.25,
        replicas: int = 0,
        replica_timeout: float = primitives.DEFAULT_REPLICA_TIMEOUT,
        forget_after: float | None = None,
    ) -> None:
        """``limit``: how many may hold it at once; the other options are
        :class:`redlease.Lock`'s."""
        self._setup(
            client, name, limit, ttl, identity, handoff, replicas, replica_timeout, forget_after
        )


R = TypeVar("R")
W = TypeVar("W")


class ReadWritePair(Generic[R, W]):
    """Many readers or one writer on one cluster slot; a waiting writer blocks new readers.

    ``reader()`` and ``writer()`` return fresh handles (each holds at most once). The blocking
    and asyncio APIs subclass this with their handle classes.
    """

    reader_class: Callable[..., R]
    writer_class: Callable[..., W]

    @checked_keywords
    def __init__(
        self,
        client: Any,
        name: str,
        *,
        ttl: float = DEFAULT_TTL,
        identity: str | None = None,
        handoff: float = 0.25,
        replicas: int = 0,
        replica_timeout: float = primitives.DEFAULT_REPLICA_TIMEOUT,
    ) -> None:
        """The options of both sides (see :class:`redlease.Lock`)."""
        self.client = client
        self.name = name
        self.options: dict[str, Any] = {
            "ttl": ttl,
            "identity": identity,
            "handoff": handoff,
            "replicas": replicas,
            "replica_timeout": replica_timeout,
        }
        self.writer_class(client, name, **self.options)  # validate now, not at first use

    def reader(self) -> R:
        return self.reader_class(self.client, self.name, **self.options)

    def writer(self) -> W:
        return self.writer_class(self.client, self.name, **self.options)


__all__ = ["ReadWritePair", "SemaphoreCore"]
