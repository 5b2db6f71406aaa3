"""The client of the sidecar's long-poll, ``GET /status?wait=SECONDS&since=VERSION``.

:func:`follow` yields the sidecar's status document at once, then each time its ``version``
changes: the sidecar answers a waiting request when it publishes a new view, so a change arrives
in milliseconds and nothing polls. Only while the sidecar cannot be read (not up yet, restarting,
503 with too many waiters) does it retry every ``interval``. `redlease wait --http` and
`redlease status --http --watch` use it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redlease.errors import ConfigError

WAIT = 30.0  # seconds each request waits at most (the sidecar caps it at 60)
SLACK = 5.0  # seconds on top of the wait before a request counts as lost


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A status document that could not be read, and why (said once to the user)."""

    reason: str


def status_url(http: str) -> str:
    """``/status`` of the sidecar at ``http``: ``host:port`` or an http(s) URL, also one pasted
    whole (``http://127.0.0.1:4040/status``, with or without a query)."""
    url = http.strip()
    url = url if "://" in url else f"http://{url}"
    if not url.startswith(("http://", "https://")):
        raise ConfigError("--http", f"not an http URL: {http!r}")
    parts = urllib.parse.urlsplit(url)
    if not parts.netloc:
        raise ConfigError("--http", f"no host in {http!r}: use HOST:PORT or http://HOST:PORT")
    path = parts.path.rstrip("/").removesuffix("/status")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path + "/status", "", ""))


def why_unreadable(exc: BaseException, timeout: float) -> str:
    """What went wrong reading a sidecar, in a few words (pure)."""
    if isinstance(exc, urllib.error.HTTPError):
        detail = ""
        with contextlib.suppress(Exception):
            detail = str(json.loads(exc.read()).get("error") or "")
        return f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else OSError(str(exc.reason))
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer within {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the sidecar running, and on this address?)"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    if isinstance(exc, ValueError):
        return "the answer is not JSON (is it a redlease sidecar?)"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def get(url: str, since: str | None = None, wait: float = 0.0) -> Any:
    """One ``GET`` of the status document (long-polling ``wait`` seconds past ``since``); an
    :class:`Unreadable` saying why if it cannot be read or is not JSON."""
    if since is not None and wait > 0:
        url += "?" + urllib.parse.urlencode({"wait": f"{wait:.3f}", "since": since})
    try:
        with urllib.request.urlopen(url, timeout=wait + SLACK) as resp:  # noqa: S310 - http(s)
            return json.loads(resp.read())
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        return Unreadable(why_unreadable(exc, wait + SLACK))


def follow(url: str, *, until: float | None = None, interval: float = 0.2) -> Iterator[Any]:
    """The status document now and after each change of its version, until the monotonic time
    ``until`` (never, if ``None``); an :class:`Unreadable` each time it cannot be read (then
    retried after ``interval``). A document without a version (a sidecar without the
    long-poll) is read again every ``interval``."""
    since: str | None = None
    while True:
        left = None if until is None else until - time.monotonic()
        if left is not None and left <= 0:
            return
        wait = WAIT if left is None else min(WAIT, left)
        doc = get(url, since, wait)
        version = doc.get("version") if isinstance(doc, dict) else None
        if version is not None and version == since:
            continue  # waited the whole time: nothing changed
        since = version if isinstance(version, str) else None
        yield doc
        if since is None:
            time.sleep(interval if left is None else max(0.0, min(interval, left)))
