"""A RedLock node set: N independent Redis masters used in place of one client.

``redlease.Lock(NodeSet([r1, r2, r3]), "name")`` (blocking clients) and
``redlease.aio.Lock(NodeSet([a1, a2, a3]), "name")`` (asyncio clients) run every primitive over
the set: an operation succeeds when a quorum (default: majority) of nodes confirms it within
the lease validity. See docs/quorum.md for the algorithm, fencing and the restart rule.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from redlease.core import client as _redis
from redlease.core.quorum import _async, _sync
from redlease.core.quorum.channel import Channel
from redlease.core.quorum.protocol import Settings
from redlease.core.restart import RESTART_DELAY, standing
from redlease.core.rules import check_quorum, semaphore_quorum, semaphore_rule
from redlease.core.urls import SENTINEL_SCHEMES, Consent, address_name, sentinel_hosts, url_options
from redlease.errors import ConfigError

NODESET_OPTIONS = ("quorum", "node_timeout", "restart_delay", "dead_after", "strict_restart")


class NodeSet:
    """N independent Redis masters (``redis.Redis`` or ``redis.asyncio.Redis`` clients, or
    Sentinel-managed master clients) that locks use as one, RedLock style.

    ``quorum``: nodes that must confirm (default majority; never less). ``node_timeout``:
    how long a fan-out waits for each node. ``restart_delay``: how long a node that lost its
    data stays out of quorums (set it to at least your longest TTL; see docs/quorum.md).
    ``dead_after``: a connection with a request unanswered this long is dropped.
    ``strict_restart``: a node that lost its data rejoins only when ``N - q + 1`` intact nodes
    can restore its fence counters, else an operator must act; by default it rejoins by itself
    after ``restart_delay`` with counters seeded from the clock too (docs/quorum.md).
    """

    is_redlease_nodeset = True

    def __init__(
        self,
        clients: Sequence[Any],
        *,
        quorum: int | None = None,
        node_timeout: float = 0.25,
        restart_delay: float = RESTART_DELAY,
        dead_after: float = 10.0,
        strict_restart: bool = False,
    ) -> None:
        clients = list(clients)
        self.quorum = check_quorum(len(clients), quorum)
        for field, value in (
            ("node_timeout", node_timeout),
            ("restart_delay", restart_delay),
            ("dead_after", dead_after),
        ):
            if (
                not isinstance(value, int | float)
                or value < 0
                or (field != "restart_delay" and value == 0)
            ):
                raise ConfigError(field, f"must be a positive number of seconds, got {value!r}")
        if not isinstance(strict_restart, bool):
            raise ConfigError("strict_restart", f"must be true or false, got {strict_restart!r}")
        flavours = {_is_async(c) for c in clients}
        if len(flavours) > 1:
            raise ConfigError("nodes", "mix of blocking and asyncio clients in one node set")
        self.clients = clients
        self.asyncio = flavours.pop()
        self.node_timeout = float(node_timeout)
        self.restart_delay = float(restart_delay)
        self.dead_after = float(dead_after)
        self.strict_restart = strict_restart
        self.names = [node_name(c) for c in clients]
        if len(set(self.names)) != len(self.names):
            raise ConfigError("nodes", f"the same node is listed twice: {', '.join(self.names)}")
        timeouts = [t for t in (_redis.socket_timeout(c) for c in clients) if t]
        self.socket_timeout = min(timeouts) if timeouts else None
        self.reseed_state: dict[str, float] = {}
        self._channels: list[Channel] | None = None
        self._loop: Any = None  # the event loop of the asyncio channels

    @classmethod
    def from_urls(cls, urls: Sequence[str], *, asyncio: bool = False, **kwargs: Any) -> NodeSet:
        """A node set from ``redis://``, ``rediss://``, ``unix://`` and ``redis+sentinel://``
        URLs; ``kwargs`` go to every client (``username``, ``password``, ``ssl_ca_certs``...),
        except the :class:`NodeSet` options (``quorum``, ``node_timeout``, ...)."""
        options = {k: kwargs.pop(k) for k in NODESET_OPTIONS if k in kwargs}
        return cls([client_from_url(u, asyncio=asyncio, **kwargs) for u in urls], **options)

    # -- used by the lock handles -------------------------------------------------------------

    @property
    def description(self) -> str:
        return f"quorum {self.quorum}/{len(self.names)} of " + ",".join(self.names)

    def settings(self, prim: Any, fresh: Any) -> Settings:
        return Settings(
            names=self.names,
            quorum=self.quorum,
            node_timeout=self.node_timeout,
            restart_delay=self.restart_delay,
            prim=prim,
            fresh=fresh,
            rng=random.Random(),
            reseed_state=self.reseed_state,
            strict_restart=self.strict_restart,
        )

    def node_for(self, handle: Any) -> Any:
        """The executor a lock handle uses instead of a single-node driver."""
        if handle.ttl > self.restart_delay:
            raise ConfigError(
                "ttl", f"{handle.ttl:g}s exceeds the node set's restart_delay "
                f"({self.restart_delay:g}s); raise restart_delay to at least the longest TTL"
            )  # fmt: skip

        def fresh(token: str) -> bool:
            return all(h.token != token for h in handle._holds.values())

        settings = self.settings(handle.prim, fresh)
        if handle.prim.limit > 1:  # a semaphore: enough nodes that limit+1 holders cannot fit
            n = len(self.names)
            settings.set_quorum = self.quorum
            settings.quorum = semaphore_quorum(n, self.quorum, handle.prim.limit)
            settings.rule = semaphore_rule(n, self.quorum, handle.prim.limit)
        if self.asyncio:
            return _async.QuorumNode(self, settings)
        return _sync.QuorumNode(self, settings)

    def channels(self) -> list[Channel]:
        """One channel per node: blocking, or asyncio (made again for a new event loop)."""
        if self.asyncio:
            loop = asyncio.get_running_loop()
            if self._channels is None or self._loop is not loop:
                self._loop = loop
                self._channels = self._make_channels(_async.Channel)
        elif self._channels is None:
            self._channels = self._make_channels(_sync.Channel)
        return self._channels

    def _make_channels(self, kind: Any) -> list[Channel]:
        return [kind(c, n, self.dead_after) for c, n in zip(self.clients, self.names, strict=True)]

    # -- health and life cycle ------------------------------------------------------------------

    def health(self) -> dict[str, int]:
        """``total``, ``healthy`` (connected nodes that count) and ``quorum``, as last seen."""
        outside = self.not_counting()
        healthy = sum(
            1
            for n, ch in zip(self.names, self._channels or [], strict=False)
            if ch.probe is not None and n not in outside
        )
        return {"total": len(self.names), "healthy": healthy, "quorum": self.quorum}

    def not_counting(self) -> dict[str, str]:
        """Connected nodes that do not count toward quorums, and why (as last probed; the
        rule of :func:`redlease.core.restart.standing`)."""
        probes = [ch.probe for ch in self._channels or []]
        if not probes:
            return {}
        why = standing(
            probes, self.quorum, self.restart_delay, time.monotonic(), self.strict_restart
        )
        return {n: w.why for n, w in zip(self.names, why, strict=True) if w is not None}

    def close(self) -> None:
        """Drop the per-node connections (blocking node sets); the clients stay open."""
        if not self.asyncio:
            for ch in self._channels or []:
                ch._close()

    async def aclose(self) -> None:
        """Drop the per-node connections (asyncio node sets); the clients stay open."""
        if self.asyncio:
            for ch in self._channels or []:
                await cast(_async.Channel, ch).close()

    def __repr__(self) -> str:
        return f"NodeSet({self.description})"


def _is_async(client: Any) -> bool:
    return type(client).__module__.startswith("redis.asyncio")


def node_name(client: Any) -> str:
    """``host:port``, ``unix:/path`` or ``sentinel:<service>``: never a password."""
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service:
        return f"sentinel:{service}"
    return _redis.describe(client)


def client_from_url(
    url: str, *, asyncio: bool = False, consent: Consent | None = None, **kwargs: Any
) -> Any:
    """One client for one node URL; ``redis+sentinel://[user:pass@]h1:p1,h2:p2/service[/db]``
    asks the Sentinels for the current master of ``service`` and, with a ``consent``, connects
    only to a master it allows (else :class:`~redlease.core.client.MasterRefused`, before a
    byte is sent to it)."""
    if url.split("://", 1)[0] in SENTINEL_SCHEMES:
        return _sentinel_client(url, asyncio=asyncio, consent=consent, **kwargs)
    if asyncio:
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(url, **kwargs)
    import redis

    return redis.Redis.from_url(url, **kwargs)


def _guarded_connection(consent: Consent, scheme: str, service: str, asyncio: bool) -> type:
    """A Sentinel-managed connection class that checks the master address before it opens a
    socket to it (so before AUTH/HELLO)."""
    if asyncio:
        from redis.asyncio import sentinel as managed
    else:
        from redis import sentinel as managed  # type: ignore[no-redef]
    tls = scheme.startswith("rediss")
    base = managed.SentinelManagedSSLConnection if tls else managed.SentinelManagedConnection

    def check(address: tuple[str, int]) -> None:
        host, port = str(address[0]), int(address[1])
        if not consent.allows_master(scheme, host, port):
            master = address_name("rediss" if tls else "redis", host, port)
            raise _redis.MasterRefused(
                f"Sentinel named master {master} for {service!r}: the credentials' owner does "
                "not consent to it, so they are not sent there"
            )

    if asyncio:

        class GuardedAsync(base):  # type: ignore[valid-type,misc]
            async def connect_to(self, address: tuple[str, int]) -> None:
                check(address)
                await super().connect_to(address)

        return GuardedAsync

    class Guarded(base):  # type: ignore[valid-type,misc]
        def connect_to(self, address: tuple[str, int]) -> None:
            check(address)
            super().connect_to(address)

    return Guarded


def _sentinel_client(url: str, *, asyncio: bool, consent: Consent | None, **kwargs: Any) -> Any:
    parts = urlsplit(url)
    hosts = sentinel_hosts(url)
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ConfigError("redis", "a redis+sentinel:// URL needs the service name as its path")
    service = unquote(path[0])
    if len(path) > 1:
        kwargs.setdefault("db", int(path[1]))
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        user, _, password = userinfo.partition(":")
        if user:
            kwargs.setdefault("username", unquote(user))
        if password:
            kwargs.setdefault("password", unquote(password))
    for key, value in url_options(url).items():  # typed, as from_url would pass them
        kwargs.setdefault(key, value)
    if parts.scheme.startswith("rediss"):
        kwargs.setdefault("ssl", True)
    if consent is not None:
        kwargs["connection_class"] = _guarded_connection(consent, parts.scheme, service, asyncio)
    sentinel_kwargs: dict[str, Any] = {
        k: kwargs[k]
        for k in ("socket_timeout", "socket_connect_timeout", "ssl", "ssl_ca_certs")
        if k in kwargs
    }
    if asyncio:
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel

        return AsyncSentinel(hosts, sentinel_kwargs=sentinel_kwargs, **kwargs).master_for(service)
    from redis.sentinel import Sentinel

    sentinel = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs, **kwargs)
    return sentinel.master_for(service)
