"""What a quorum channel sends first on every new connection, and how the answers are read.

Scripts are loaded up front (``SCRIPT LOAD``) so that requests can be pipelined with
``EVALSHA``: a ``NOSCRIPT`` retry would break the order of an acquire and its undo. The probe
reads the server's ``run_id`` and uptime, the node's redlease marker and its persistence mode,
which :func:`redlease.core.rules.membership` turns into the restart rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from redlease.core import scripts
from redlease.core.quorum.flows import MARKER_KEY
from redlease.core.rules import Probe

COMMANDS: tuple[tuple[str, ...], ...] = (
    *(("SCRIPT", "LOAD", s.lua) for s in scripts.ALL_SCRIPTS),
    ("INFO", "server"),
    ("HGET", MARKER_KEY, "run_id"),
    ("CONFIG", "GET", "appendonly"),
    ("CONFIG", "GET", "appendfsync"),
)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None or isinstance(value, BaseException) else str(value)


def _config(value: object) -> str:
    """The value of a ``CONFIG GET`` reply (list or dict; '' if refused by ACL)."""
    if isinstance(value, dict):
        items = [_text(v) for v in value.values()]
        return items[0] if items else ""
    if isinstance(value, list | tuple) and len(value) >= 2:
        return _text(value[1])
    return ""


def parse(replies: Sequence[object], at: float) -> Probe:
    """Turn the replies to :data:`COMMANDS` into a :class:`Probe` (``at``: monotonic time)."""
    base = len(scripts.ALL_SCRIPTS)
    for reply in replies[:base]:
        if isinstance(reply, BaseException):
            raise reply
    info, marker, aof, fsync = replies[base : base + 4]
    if isinstance(info, BaseException):
        raise info
    fields = dict(
        line.split(":", 1) for line in _text(info).splitlines() if ":" in line and line[0] != "#"
    )
    return Probe(
        run_id=fields.get("run_id", "").strip(),
        uptime=float(fields.get("uptime_in_seconds", "0").strip() or 0),
        at=at,
        marker=_text(marker) or None,
        durable=_config(aof) == "yes" and _config(fsync) == "always",
    )
