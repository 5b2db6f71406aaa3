"""What a quorum channel sends first on every new connection, and how the answers are read.

Scripts are loaded up front so that requests can be pipelined: the redlease Functions library
(``FUNCTION LOAD``; requests then use ``FCALL``, which skips building the helpers on every
call) where the server has Functions, and every script (``SCRIPT LOAD``, for ``EVALSHA``) for
the servers that do not (Redis 6.2): a retry after ``NOSCRIPT`` would break the order of an
acquire and its undo. ``FCALL`` is used on a connection only when the library under
redlease's name is byte for byte redlease's code (``scripting.LIBRARY_CHECK``, in the same
pipeline: no extra round trip); other code there (another ACL user's ``FUNCTION LOAD
REPLACE``) means ``EVALSHA``. The probe reads the server's ``run_id`` and uptime, the node's
redlease marker and its persistence mode, which :func:`redlease.core.restart.membership` turns
into the restart rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from redlease.core import scripts
from redlease.core.durability import durable as is_durable
from redlease.core.restart import Probe
from redlease.core.scripting import LIBRARY_CHECK, library_verdict

# hash on every node: ``run_id`` of the server whose data is intact; ``born``: the birth list
# (the run ids of every server of the set, seen fresh together when the set was first marked)
MARKER_KEY = "redlease:node"

NODE: tuple[tuple[str, ...], ...] = (  # what the server and the marker say, at one moment
    ("INFO", "server"),
    ("HMGET", MARKER_KEY, "run_id", "born"),
)
COMMANDS: tuple[tuple[str, ...], ...] = (
    *(("SCRIPT", "LOAD", s.lua) for s in scripts.ALL_SCRIPTS),
    ("FUNCTION", "LOAD", scripts.LIBRARY),
    LIBRARY_CHECK,
    *NODE,
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
    _load, library, info, marker, aof, fsync = replies[base : base + 6]
    durable = is_durable(_config(aof), _config(fsync))
    probe = Probe("", 0.0, at, None, durable, functions=library_verdict(library) is True)
    return node(probe, [info, marker], at)


def node(probe: Probe, replies: Sequence[object], at: float) -> Probe:
    """``probe`` updated with the replies to :data:`NODE` (read at monotonic time ``at``)."""
    info, marker = replies
    if isinstance(info, BaseException):
        raise info
    if isinstance(info, dict):  # redis-py parsed it (a client's own INFO)
        fields = {str(k): _text(v) for k, v in info.items()}
    else:
        fields = dict(
            line.split(":", 1)
            for line in _text(info).splitlines()
            if ":" in line and line[0] != "#"
        )
    run_id, born = marker if isinstance(marker, list | tuple) and len(marker) == 2 else ("", "")
    return replace(
        probe,
        run_id=fields.get("run_id", "").strip(),
        uptime=float(fields.get("uptime_in_seconds", "0").strip() or 0),
        at=at,
        marker=_text(run_id) or None,
        born=frozenset(_text(born).split()),
    )


def mark(run_id: str, born: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The command that marks a node as intact for server ``run_id`` (with a birth list)."""
    fields = ("run_id", run_id, *(("born", " ".join(sorted(born))) if born else ()))
    return ("HSET", MARKER_KEY, *fields)
