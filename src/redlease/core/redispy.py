"""Every private piece of redis-py redlease reaches into (and two of what it wraps: an asyncio
stream's buffer, redis-py's hiredis reader), in one place.

The drivers read replies straight from a connection's parser (redis-py's ``read_response``
around it cost about a tenth of an uncontended pair: :func:`read_within`), the asyncio ones
write straight to its stream (synchronously: a cancellation never leaves half a request
behind); :mod:`.idle` and :mod:`.dial` ask a connection's socket; :mod:`.lent` shields an
asyncio cluster node's connections in use from a reset; :mod:`._async` asks whether an asyncio
cluster's slot map is due; the quorum's asyncio transport hands a probed connection's bytes to
a hiredis reader of its own (:func:`hiredis_reader`).
None of that is redis-py's public API, so every name of it is here:

- an attribute name (:data:`SOCK`, :data:`WRITER`...), which the request path reads as
  ``getattr(conn, redispy.WRITER, None)``: a function here would cost a call per request
  (tests/devtools/test_client_calls.py counts them);
- a function that does the reading where the whole function can live here at no cost
  (:func:`read_within`, :func:`aread`) or where no request waits on it (:func:`hiredis_reader`).

:data:`INTERNALS` lists them with what they live on. tests/core/test_redispy_fence.py checks each
on real objects of the locked redis-py (requirements/dev.txt), connected to a real server, so a
release that renames or drops one fails there; it also fails a use of a redis-py private
anywhere else in ``src/``. Every name here was checked by that test on redis-py 5.0.1, 6.4.0,
7.0.1 and 8.2.0 (the lock); `make test-floor` runs it, with the core suites, on pyproject's
floor (6.2.0).
Attributes redlease sets on redis-py objects itself are its own, named ``_redlease_...``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

import hiredis
import redis.exceptions as rex

SOCK: Final = "_sock"
"""A blocking connection's socket (``redis.connection.AbstractConnection``, Sentinel's too);
None while not connected. Read with its own timeout (:func:`read_within`), polled for a stray
byte or a closed peer before a kept connection is reused (:mod:`.idle`), and tested before a
quorum write so that a dropped connection is never reconnected silently."""

PARSER: Final = "_parser"
"""Either connection's reply parser (redis-py's ``_parsers`` classes; hiredis's where hiredis
is installed, a dependency): replies are read from it (``read_response``), skipping the
connection's wrapper around it (an error text built for every read, a read timeout, the
health-check clock)."""

WRITER: Final = "_writer"
"""An asyncio connection's ``asyncio.StreamWriter``; None while not connected. Requests are
written to it synchronously (a cancellation never leaves half a request behind) and its
transport's socket and write buffer are asked (:mod:`.idle`, the quorum transport)."""

READER: Final = "_reader"
"""An asyncio connection's ``asyncio.StreamReader``: what it buffered must be empty before the
quorum transport takes the connection's bytes over (:func:`hiredis_reader`)."""

STREAM_BUFFER: Final = "_buffer"
"""CPython's ``asyncio.StreamReader`` (not redis-py's): the bytes received and not read yet."""

PARSER_READER: Final = "_reader"
"""redis-py's hiredis parser (``_AsyncHiredisParser``): its ``hiredis.Reader``, which must hold
no unparsed bytes either (``has_data``)."""

MAP_DUE: Final = "_initialize"
"""``redis.asyncio.RedisCluster``: True until its slot map is read, and again once an error
asked for another read. A driver reads the map first while it is (:mod:`.topology`), never
letting redis-py route a keyed command to a default node."""

NODE_CONNECTIONS: Final = "_connections"
"""``redis.asyncio.cluster.ClusterNode``: every connection of the node, free and in use, which
a client's reset (``aclose``) walks; :mod:`.lent` puts a stand-in in place of one in use."""

# (what it lives on, name): everything above, and the public methods used of redis-py's
# private parser classes (``redis._parsers``); checked on real objects
INTERNALS: Final = [
    ("Connection", SOCK),
    ("Connection", PARSER),
    ("parser", "read_response"),
    ("asyncio Connection", WRITER),
    ("asyncio Connection", READER),
    ("asyncio Connection", PARSER),
    ("asyncio parser", "read_response"),
    ("asyncio parser", "parse_error"),
    ("asyncio parser", PARSER_READER),
    ("asyncio.StreamReader", STREAM_BUFFER),
    ("asyncio RedisCluster", MAP_DUE),
    ("asyncio ClusterNode", NODE_CONNECTIONS),
]


def no_reply(timeout: float) -> rex.TimeoutError:
    """The error of a read given up on after ``timeout`` seconds: redis-py's own timeout."""
    return rex.TimeoutError(f"no reply within {timeout:g}s")


def read_within(conn: Any, timeout: float | None) -> Any:
    """The next reply on ``conn`` (a blocking redis-py connection; an error reply raised as
    redis-py raises it), each read of the socket waiting at most ``timeout`` (None: the
    client's socket timeout): :func:`no_reply` after that.

    The socket's own timeout bounds the read (CPython polls once before each ``recv``): left as
    it is when it is already as short (the usual case: a request's bound is the client's socket
    timeout), else set for this read and put back after (each set is an ``ioctl``). Asking
    ``conn.can_read(timeout)`` first cost four more system calls per request with redis-py
    8.2's hiredis parser (a readiness poll, a half-close poll and a one-byte ``MSG_PEEK``, each
    behind its own poll), and a tenth of an uncontended pair's client instructions. A reply cut
    by the timeout part way stays in the parser's buffer, so the connection keeps its order
    for a later read. The reply comes straight from the connection's parser where it has one,
    as :func:`aread` reads (``read_response`` builds an error text for every read and keeps the
    health-check clock; the drivers write without health checks); a failing socket is
    redis-py's ConnectionError or TimeoutError, as there. Before redis-py 8.0 the blocking
    hiredis parser raised the builtin TimeoutError on a timed-out read, not redis-py's: both
    are :func:`no_reply` (the deadline handling knows only redis-py's)."""
    sock = conn._sock  # SOCK: None once dropped
    if sock is None:
        raise rex.ConnectionError("the connection was closed")
    parser = getattr(conn, PARSER, None)
    read = conn.read_response if parser is None else parser.read_response
    before = sock.gettimeout()
    if timeout is None or (before is not None and timeout >= before):
        try:
            reply = read()
        except (rex.TimeoutError, TimeoutError):
            raise no_reply(before or 0.0) from None
    else:
        sock.settimeout(timeout)
        try:
            reply = read()
        except (rex.TimeoutError, TimeoutError):
            raise no_reply(timeout) from None
        finally:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing to put back
                sock.settimeout(before)
    if isinstance(reply, rex.ResponseError):
        raise reply
    return reply


async def aread(conn: Any) -> Any:
    """One reply from ``conn`` (an asyncio redis-py connection), an error reply returned (not
    raised). Straight from the connection's parser where it has one: ``read_response`` adds a
    read timeout (the caller keeps its own), an error text built for every read and the
    health-check clock (the drivers write without health checks), about a tenth of an
    uncontended request's client time. A failing socket is redis-py's ConnectionError, as
    there."""
    parser = getattr(conn, PARSER, None)
    try:
        if parser is None:
            return await conn.read_response(disconnect_on_error=False)
        reply = await parser.read_response()
    except rex.ResponseError as exc:
        return exc
    except OSError as exc:
        raise rex.ConnectionError(f"error while reading: {exc}") from exc
    if isinstance(reply, rex.ConnectionError):
        raise reply
    return reply


def aunread(conn: Any) -> bool | None:
    """Whether an asyncio connection has something unread or its stream ended (True) or is
    clean (False), asked without awaiting: what redis-py 8's hiredis parser answers in its
    ``can_read`` coroutine (unparsed bytes, the stream's end or error, the stream's buffer).
    None when it cannot be told here (not a hiredis parser): ask ``can_read``. The uncontended
    request takes its kept connection with this (:func:`redlease.core.idle.aready`), without a
    coroutine and a deadline around it (issue 39)."""
    stream = getattr(conn, READER, None)
    reader = getattr(getattr(conn, PARSER, None), PARSER_READER, None)
    if stream is None or reader is None or not hasattr(reader, "has_data"):
        return None
    return bool(
        reader.has_data()
        or stream.at_eof()
        or stream.exception() is not None
        or getattr(stream, STREAM_BUFFER, b"")
    )


def hiredis_reader(conn: Any, more: object) -> hiredis.Reader | None:
    """A ``hiredis.Reader`` that parses ``conn``'s replies (a connected asyncio redis-py
    connection) as its own parser does: redis-py's error classes for error replies, its
    decoding; ``more`` is what ``gets()`` returns while no reply is complete. None if redis-py
    has buffered bytes it did not parse yet: taking the stream over would lose them."""
    parser = getattr(conn, PARSER)
    buffered = getattr(getattr(conn, READER), STREAM_BUFFER, b"")
    unparsed = getattr(getattr(parser, PARSER_READER, None), "has_data", lambda: False)()
    if buffered or unparsed:
        return None
    kwargs: dict[str, Any] = {
        "protocolError": rex.InvalidResponse,
        "replyError": parser.parse_error,
        "notEnoughData": more,
    }
    if conn.encoder.decode_responses:
        kwargs["encoding"] = conn.encoder.encoding
        kwargs["errors"] = conn.encoder.encoding_errors
    return hiredis.Reader(**kwargs)
