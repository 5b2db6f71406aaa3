"""Build redis-py clients from ``redis://``, ``rediss://`` and ``unix://`` URLs.

This is how the CLI, the sidecar and the operator turn user configuration into what the lock
classes take: one URL gives one client; ``cluster=True`` gives a RedisCluster client.
Passwords come from the URL or the ``password`` argument and are never logged or printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redlease.errors import ConfigError

SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")


def validate_url(url: str, field: str = "redis") -> str:
    """Check one node URL; the error names ``field`` and never echoes a password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ConfigError(field, f"not a URL: {redact(url)}") from None
    if parts.scheme not in SCHEMES:
        raise ConfigError(
            field, f"unsupported scheme in {redact(url)}: use redis://, rediss:// or unix://"
        )
    if parts.scheme.endswith("+sentinel"):  # h1:p1,h2:p2/service: checked by redlease.core.quorum
        if not parts.netloc or not parts.path.strip("/"):
            raise ConfigError(field, f"sentinel URL needs hosts and a service: {redact(url)}")
        return url
    if parts.scheme == "unix":
        if not parts.path:
            raise ConfigError(field, f"unix URL needs a socket path: {redact(url)}")
    else:
        if not parts.hostname:
            raise ConfigError(field, f"URL needs a host: {redact(url)}")
        try:
            _ = parts.port
        except ValueError:
            raise ConfigError(field, f"bad port in {redact(url)}") from None
    return url


def redact(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe to print and log)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    netloc = f"{user}:***@" + parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def connect(
    urls: Sequence[str],
    *,
    asyncio: bool = False,
    cluster: bool = False,
    username: str | None = None,
    password: str | None = None,
    socket_timeout: float | None = 5.0,
    **kwargs: Any,
) -> Any:
    """A client for ``urls``: one URL → ``Redis``; ``cluster=True`` → ``RedisCluster``.

    ``asyncio=True`` returns the ``redis.asyncio`` flavour. Several independent URLs (a RedLock
    node set) are handled by :mod:`redlease.core.quorum` where available.
    """
    if not urls:
        raise ConfigError("redis", "at least one Redis URL is required")
    for url in urls:
        validate_url(url)
    extra: dict[str, Any] = dict(kwargs)
    if username is not None:
        extra["username"] = username
    if password is not None:
        extra["password"] = password
    if socket_timeout is not None:
        extra["socket_timeout"] = socket_timeout
        extra["socket_connect_timeout"] = socket_timeout
    if cluster:
        if asyncio:
            from redis.asyncio.cluster import RedisCluster as AsyncCluster

            return AsyncCluster.from_url(urls[0], **extra)
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(urls[0], **extra)
    if len(urls) > 1:
        try:
            from redlease.core import quorum
        except ImportError:
            raise ConfigError("redis", "several URLs need RedLock quorum support") from None
        return quorum.NodeSet.from_urls(urls, asyncio=asyncio, **extra)
    if asyncio:
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(urls[0], **extra)
    import redis

    return redis.Redis.from_url(urls[0], **extra)
