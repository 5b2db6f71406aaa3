"""How one server runs a :class:`~redlease.core.requests.Call`: FCALL of the verified
redlease Functions library, else EVALSHA (the policy every transport asks; sans-I/O).

The library check (:data:`LIBRARY_CHECK`) and its verdict live here too: the quorum probe
reads the same command (:mod:`redlease.core.quorum._probe`).
"""

from __future__ import annotations

import math
import time
from typing import Any

from redlease.core import scripts
from redlease.core.clock import Clock
from redlease.core.replies import as_str
from redlease.core.requests import Call

# the one command that reads the library loaded under redlease's name, with its code
LIBRARY_CHECK: tuple[str, ...] = (
    "FUNCTION",
    "LIST",
    "LIBRARYNAME",
    scripts.LIBRARY_NAME,
    "WITHCODE",
)
_LIBRARY_CODE = scripts.LIBRARY.encode()
# seconds a verified library is trusted before it is checked again: another ACL user's
# ``FUNCTION LOAD REPLACE`` is run by a client for at most this long (plus a round trip)
RECHECK = 10.0


def library_verdict(reply: object) -> bool | None:
    """What a reply to :data:`LIBRARY_CHECK` says: True when the library loaded under
    redlease's name is byte for byte redlease's code, None when none is loaded, False for
    anything else (other code under that name, an error reply: no Functions, or refused).

    Anyone allowed ``FUNCTION LOAD REPLACE`` can put any code under any library name, and a
    function runs with its caller's rights on its caller's keys: only verified code is called.
    """
    if isinstance(reply, BaseException) or not isinstance(reply, list):
        return False
    found: bool | None = None
    for library in reply:
        if isinstance(library, list):  # RESP2: name, value, name, value...
            library = dict(zip(library[::2], library[1::2], strict=False))
        if not isinstance(library, dict):
            return False
        fields = {as_str(k): v for k, v in library.items()}
        if as_str(fields.get("library_name")) != scripts.LIBRARY_NAME:
            continue  # the name is a pattern: ours has no wildcard, but say so exactly
        code = fields.get("library_code")
        code = code.encode() if isinstance(code, str) else code
        if code != _LIBRARY_CODE:
            return False
        found = True
    return found


def _refused(error: BaseException) -> bool:
    """The server has no Functions (Redis 6: unknown command) or the ACL refuses them."""
    text = str(error).lower()
    return "unknown command" in text or "permission" in text


class Scripting:
    """How one server runs :class:`Call` s: ``FCALL`` of the redlease Functions library where
    the server has Functions (Redis 7+, Valkey; the helpers are built once, at load) and the
    library loaded under redlease's name was verified to be redlease's code, else ``EVALSHA``
    (Redis 6.2; an ACL that refuses Functions; other code under redlease's library name), with
    ``SCRIPT LOAD`` after a ``NOSCRIPT`` reply. ``EVALSHA`` names a script by the hash of its
    code, so nobody can swap what it runs.

    Verification (:data:`LIBRARY_CHECK`, one round trip) comes before the first ``FCALL`` of a
    server, again :data:`RECHECK` seconds after the last one (a library replaced meanwhile is
    called for at most that long) and after any ``FCALL`` that says its function is missing; a
    library loaded here (``FUNCTION LOAD REPLACE`` answered with its name) counts as verified.

    Every transport asks :meth:`command` for what to send and, after each reply,
    :meth:`recover` for what to send next; one instance per server (see
    ``client.scripting``) remembers what the server supports.
    """

    __slots__ = ("checked", "clock", "functions", "loaded")

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.functions = True  # Functions may be used, until the server says otherwise
        self.checked = -math.inf  # when the library's code was last verified (``clock``)
        self.loaded = False  # this client loaded the library (a second miss: give up on it)

    @property
    def verified(self) -> bool:
        """The library's code was verified less than :data:`RECHECK` seconds ago."""
        return self.clock() - self.checked < RECHECK

    @property
    def settled(self) -> bool:
        """:meth:`command` sends the script itself (no library check due): requests may be
        pipelined."""
        return not self.functions or self.verified

    def command(self, call: Call) -> tuple[str | int, ...]:
        """What to send first for ``call``: the library check when one is due, then FCALL."""
        if not self.functions:
            return call.evalsha()
        if not self.verified:
            return LIBRARY_CHECK
        return call.fcall()

    def recover(self, call: Call, sent: tuple[str | int, ...], reply: Any) -> tuple[Any, ...]:
        """The commands to send after ``reply`` answered ``sent`` (a command for ``call``), in
        order (the reply to the last is the script's or needs :meth:`recover` again); ``()``
        when ``reply`` is the script's result or an error that stands. A refused script did
        not run, so sending it again is safe."""
        head = sent[0]
        if head == "FUNCTION":
            return self._library(call, sent, reply)
        if not isinstance(reply, BaseException):
            if head == "FCALL":
                self.loaded = False
            return ()
        text = str(reply).lower()
        if head == "FCALL":
            if "function not found" in text and not self.loaded:  # new, emptied or replaced
                self.checked = -math.inf
                return (LIBRARY_CHECK,)
            if "function not found" in text or _refused(reply):
                # no Functions here (Redis 6), not allowed to use them, or loading did not
                # take: EVALSHA from now on
                self.functions = False
                return (call.evalsha(),)
        elif head == "EVALSHA" and text.startswith(("noscript", "no matching script")):
            # loaded scripts stay cached (an EVAL'd one can be evicted, see docs/servers.md)
            return (("SCRIPT", "LOAD", call.script.lua), call.evalsha())
        return ()

    def _library(self, call: Call, sent: tuple[str | int, ...], reply: Any) -> tuple[Any, ...]:
        """After the library check or load: FCALL if the library is ours, a load if none is
        there (once), else EVALSHA from now on."""
        if sent[1] == "LIST":
            if isinstance(reply, BaseException) and not _refused(reply):
                return ()  # a passing error (busy, loading): it stands, the next call checks
            verdict = library_verdict(reply)
            if verdict is None and not self.loaded:
                self.loaded = True
                return (("FUNCTION", "LOAD", "REPLACE", scripts.LIBRARY),)
            ours = bool(verdict)
        else:  # our load: answered with the library's name (a function of another library
            # with one of our names, an ACL refusal: an error)
            ours = not isinstance(reply, BaseException) and as_str(reply) == scripts.LIBRARY_NAME
        if ours:
            self.checked = self.clock()
            return (call.fcall(),)
        self.functions = False
        return (call.evalsha(),)
