"""Constructor arguments checked the way a new user needs: one ConfigError naming the fix.

Pure. :func:`checked_keywords` turns an unknown keyword (a TypeError naming an internal class)
into a :class:`~redlease.errors.ConfigError` naming the right keyword: redis-py's and
python-redis-lock's ``timeout=`` (their TTL) gets "the TTL is ``ttl=``", other misspellings a
did-you-mean. :func:`check_flavour` refuses a blocking client given to an asyncio class (or the
reverse) at construction, instead of a ``'coroutine' object has no attribute ...`` at first use.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from redlease.errors import ConfigError

P = ParamSpec("P")
S = TypeVar("S")

# keywords other libraries use for what redlease calls something else
HINTS = {
    "timeout": "the TTL is `ttl=`; `timeout` is how long acquire waits (acquire(timeout=...))",
    "expire": "the TTL is `ttl=` (seconds)",
    "lease_time": "the TTL is `ttl=` (seconds)",
    "lease_duration": "the TTL is `ttl=` (seconds)",
    "blocking_timeout": "`timeout` is acquire's: acquire(timeout=...)",
    "blocking": "`blocking` is acquire's: acquire(blocking=False)",
    "auto_renewal": "`with lock:` and lock.hold() renew the lease already",
    "id": "the holder's name is `identity=`",
}


def unknown_keyword(word: str, known: list[str]) -> ConfigError:
    """The ConfigError for keyword ``word`` among the ``known`` ones (named in the message)."""
    hint = HINTS.get(word)
    if hint is None:
        close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}=`?" if close else ""
    takes = "takes " + ", ".join(f"{k}=" for k in known) if known else "takes no keywords"
    return ConfigError(word, f"unknown keyword; {hint + '; ' if hint else ''}{takes}")


def checked_keywords(
    init: Callable[Concatenate[S, P], None],
) -> Callable[Concatenate[S, P], None]:
    """Wrap a constructor so that an unknown keyword raises :func:`unknown_keyword`'s error;
    ``inspect.signature`` and help() still show ``init``'s own parameters (``__wrapped__``)."""
    params = inspect.signature(init).parameters
    known = [n for n, p in params.items() if p.kind == p.KEYWORD_ONLY]

    @functools.wraps(init)
    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> None:
        for word in kwargs:
            if word not in params:
                raise unknown_keyword(word, known)
        init(self, *args, **kwargs)

    return wrapper


def is_asyncio_client(client: Any) -> bool | None:
    """True for an asyncio client (redis.asyncio, an asyncio node set), False for a blocking
    one, None when it cannot be told (a stand-in: left to the first call)."""
    nodeset = getattr(client, "is_redlease_nodeset", False)
    flavour = getattr(client, "asyncio", None) if nodeset else None
    if isinstance(flavour, bool):
        return flavour
    if type(client).__module__.startswith("redis.asyncio"):
        return True
    execute = getattr(client, "execute_command", None)
    if execute is None:
        return None
    return inspect.iscoroutinefunction(execute)


def check_flavour(client: Any, asyncio: bool, cls: str) -> None:
    """Refuse ``client`` for class ``cls`` when one is asyncio and the other blocking."""
    flavour = is_asyncio_client(client)
    if flavour is None or flavour == asyncio:
        return
    kind = type(client)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if asyncio:
        fix = f"use redlease.{cls} with it, or give redlease.aio.{cls} a redis.asyncio client"
        raise ConfigError("client", f"{name} is a blocking client; {fix}")
    fix = f"use redlease.aio.{cls} with it, or give redlease.{cls} a blocking redis client"
    raise ConfigError("client", f"{name} is an asyncio client; {fix}")
