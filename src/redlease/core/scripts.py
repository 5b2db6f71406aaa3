"""Lua scripts: every lock operation is exactly one of these, one round trip each.

The Lua lives in files of its own, shipped with the package: ``core/lua/NAME.lua`` is the
script ``NAME``, headed with its KEYS, ARGV and reply; ``core/lua/helpers/NAME.lua`` is the
helper function ``NAME`` that scripts share (``grant``, ``enqueue``, ``pass_on``...). This module
links them: a script's ``--@prelude`` line becomes the helpers it calls (and those they call),
each defined after the helpers it calls, for ``EVAL``/``EVALSHA``; the Functions library
(:data:`LIBRARY`, for ``FCALL``) defines every helper once and wraps each script body in a
function. The words ``HANDED_MS`` and ``HANDOFF_MS`` in the Lua are this module's constants.

Times are server time (``TIME``) in milliseconds; TTLs are milliseconds. Scripts touch only the
keys they are passed, and all keys of one lock share the hash tag ``{NAME}`` (one cluster slot).

The exclusive acquire is three scripts, by job: :data:`ACQUIRE` one lock (mutex, reentrant;
the uncontended path), :data:`ACQUIRE_MULTI` several locks held as one lease on one node,
:data:`ACQUIRE_SLOT` a counting semaphore's slot; :class:`~redlease.core.primitives.Primitive`
picks one by the lease's kind.

Reply status codes (first element of every acquire reply):

* ``1`` granted, ``0`` held by someone else, ``2`` already held by this owner,
  ``3`` free but reserved for registered waiters (a fair hand-off is under way).

A release replies the reentrant count left, ``-1`` not the owner, and (its short form only)
``-2`` waiters are registered: nothing done, send the full form.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib.resources import files

GRANTED = 1
HELD = 0
ALREADY = 2
RESERVED = 3
WAITERS = -2  # RELEASE's short form found waiters: nothing done, the full form must follow

HANDED_MS = 2_000
"""The longest lease a direct hand-off grants (ms): provisional, the waiter extends it to its TTL
when it picks the grant up (``_handed`` in core/flows.py). So a waiter that died while enlisted
(SIGKILL between its last attempt and the release) holds the lock for this long, not its whole
TTL (docs/safety.md, "A hand-off to a waiter that died"). The waiter's own ACQUIRE enlists with
it, so a releaser of any version grants what the waiter will confirm."""

HANDOFF_MS = 250
"""How long a released lock stays reserved for the waiters it woke (ms), unless the lock's
``handoff`` option says otherwise: RELEASE's default, so the common release does not send it."""

_LUA = files("redlease.core") / "lua"
_CONSTANTS = {"HANDED_MS": str(HANDED_MS), "HANDOFF_MS": str(HANDOFF_MS)}
_CONSTANT = re.compile(r"\b(" + "|".join(_CONSTANTS) + r")\b")
_COMMENT = re.compile(r"--[^\n]*")
_PRELUDE = "--@prelude\n"  # in a script: replaced by the helper functions it calls


def _read(name: str, folder: str = "") -> str:
    """The text of ``core/lua/[folder/]name.lua``, its constants filled in."""
    path = _LUA / folder / f"{name}.lua" if folder else _LUA / f"{name}.lua"
    return _CONSTANT.sub(lambda m: _CONSTANTS[m.group(1)], path.read_text(encoding="utf-8"))


def _calls(names: list[str]) -> re.Pattern[str]:
    """What finds a call of one of the functions ``names`` (``name(``)."""
    return re.compile(r"\b(" + "|".join(names) + r")\(")


def _called(code: str, calls: re.Pattern[str], own: str = "") -> list[str]:
    """The functions that ``code`` calls outside ``--`` comments (``calls`` finds them),
    itself (``own``) left out, sorted."""
    return sorted({m.group(1) for m in calls.finditer(_COMMENT.sub("", code))} - {own})


def _linked(helpers: dict[str, str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``helpers`` ordered so that each comes after the helpers it calls (a Lua local function
    must be defined before the function that calls it; ties by name), and the helpers each one
    calls. A cycle is an error."""
    calls = _calls(list(helpers))
    deps = {name: _called(code, calls, name) for name, code in helpers.items()}
    out: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in out:
            return
        if name in path:
            raise RuntimeError(f"Lua helpers call each other in a cycle: {(*path, name)}")
        for dep in deps[name]:
            visit(dep, (*path, name))
        out[name] = helpers[name]

    for name in sorted(helpers):
        visit(name, ())
    return out, deps


_HELPERS, _DEPS = _linked(
    {
        p.name.removesuffix(".lua"): _read(p.name.removesuffix(".lua"), "helpers")
        for p in (_LUA / "helpers").iterdir()
        if p.name.endswith(".lua")
    }
)
_HELPER_CALLS = _calls(list(_HELPERS))


def _prelude_for(lua: str) -> str:
    """Only the helper functions ``lua`` calls (directly or through other helpers), in link
    order: building unused closures costs Redis time on every ``EVALSHA``."""
    needed: set[str] = set()
    todo = _called(lua, _HELPER_CALLS)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += _DEPS[name]
    return "".join(code for name, code in _HELPERS.items() if name in needed)


@dataclass(frozen=True, slots=True)
class Script:
    """A named Lua script: ``lua`` (for EVAL, its SHA1 ``sha`` for EVALSHA) and the name of the
    same code as a function of the redlease Functions library (``function``, for FCALL).

    ``body`` is the script without the helper prelude: the library defines the helpers once,
    at load, and wraps every body in a function (:data:`LIBRARY`), so both forms run one source.
    """

    name: str
    lua: str
    sha: str = field(init=False)
    body: str = field(init=False)
    function: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", self.lua.replace(_PRELUDE, ""))
        if _PRELUDE in self.lua:
            object.__setattr__(self, "lua", self.lua.replace(_PRELUDE, _prelude_for(self.lua)))
        object.__setattr__(self, "sha", hashlib.sha1(self.lua.encode()).hexdigest())  # noqa: S324

    @classmethod
    def load(cls, name: str) -> Script:
        """The script in ``core/lua/<name>.lua``."""
        return cls(name, _read(name))


ACQUIRE = Script.load("acquire")
ACQUIRE_MULTI = Script.load("acquire_multi")
ACQUIRE_SLOT = Script.load("acquire_slot")
RELEASE = Script.load("release")
EXTEND = Script.load("extend")
LEAVE = Script.load("leave")
GIVE_UP = Script.load("give_up")
ACQUIRE_READ = Script.load("acquire_read")
ACQUIRE_WRITE = Script.load("acquire_write")
RELEASE_READ = Script.load("release_read")
EXTEND_READ = Script.load("extend_read")
HEARTBEAT = Script.load("heartbeat")
STATUS = Script.load("status")
FORCE_RELEASE = Script.load("force_release")
RAISE_FENCE = Script.load("raise_fence")
RETIRE = Script.load("retire")

ALL_SCRIPTS = (
    ACQUIRE,
    ACQUIRE_MULTI,
    ACQUIRE_SLOT,
    RELEASE,
    EXTEND,
    LEAVE,
    GIVE_UP,
    ACQUIRE_READ,
    ACQUIRE_WRITE,
    RELEASE_READ,
    EXTEND_READ,
    HEARTBEAT,
    STATUS,
    FORCE_RELEASE,
    RAISE_FENCE,
    RETIRE,
)


def _library(all_scripts: tuple[Script, ...]) -> tuple[str, str]:
    """The redlease Functions library (Redis 7+, Valkey): every helper defined once, at load, and
    every script's body as a function. Its name and its function names carry a version (a hash
    of the code), so clients of different versions can share a server; ``FUNCTION LOAD
    REPLACE`` of the same version is idempotent. Sets each script's ``function``."""
    version = hashlib.sha1("".join(s.sha for s in all_scripts).encode()).hexdigest()[:12]  # noqa: S324
    parts = [f"#!lua name=redlease_{version}\n", *_HELPERS.values()]
    for s in all_scripts:
        name = f"redlease_{version}_{s.name}"
        object.__setattr__(s, "function", name)
        # now_cache is the helpers' per-call TIME cache: a library keeps it between calls
        parts.append(
            f"redis.register_function('{name}', function(KEYS, ARGV)\nnow_cache = nil\n"
            f"{s.body}\nend)\n"
        )
    return f"redlease_{version}", "".join(parts)


# loaded where none is, FCALL'd only where the code under LIBRARY_NAME is this (scripting.Scripting)
LIBRARY_NAME, LIBRARY = _library(ALL_SCRIPTS)
