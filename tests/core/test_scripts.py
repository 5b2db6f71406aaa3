"""The Lua as shipped and linked: every script's helpers present, each acquire job its script.

The scripts live in ``core/lua/*.lua`` and their shared helpers in ``core/lua/helpers/``;
``core/scripts.py`` links a script's helpers in for EVAL and defines them all in the Functions
library. A helper left out, or defined after its caller, would surface only on the branch that
calls it (Lua resolves an unknown name as a global, which Redis refuses at run time).
"""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from redlease.core import scripts
from redlease.core.keys import LockKeys
from redlease.core.primitives import Options, Primitive

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "src" / "redlease" / "core" / "lua"
# names before a "(" that a script does not define: Lua's keywords and functions
BUILTINS = {"function", "if", "elseif", "while", "and", "or", "not", "return", "in", "until"}
BUILTINS |= {"tonumber", "tostring", "unpack", "ipairs", "pairs", "type", "error", "select"}
_STRINGS_AND_COMMENTS = re.compile(r"'[^'\n]*'|--[^\n]*")
_CALL = re.compile(r"(?<![\w.:])([A-Za-z_]\w*)\s*\(")


def undefined_calls(lua: str) -> set[str]:
    """The functions ``lua`` calls before (or without) defining them as local functions."""
    code = _STRINGS_AND_COMMENTS.sub("''", lua)
    bad = set()
    for m in _CALL.finditer(code):
        name = m.group(1)
        defined = code.find(f"local function {name}(")
        if name not in BUILTINS and (defined < 0 or defined > m.start()):
            bad.add(name)
    return bad


@pytest.mark.parametrize("script", scripts.ALL_SCRIPTS, ids=lambda s: s.name)
def test_each_script_defines_every_helper_it_calls_first(script: scripts.Script) -> None:
    assert undefined_calls(script.lua) == set()


def test_the_library_defines_every_helper_before_the_functions() -> None:
    assert undefined_calls(scripts.LIBRARY) == set()
    assert scripts.LIBRARY.count("redis.register_function(") == len(scripts.ALL_SCRIPTS)


def test_a_script_is_linked_with_only_the_helpers_it_uses() -> None:
    """EVAL builds every helper of its prelude on each call: none it does not reach."""
    assert "local function slot_of(" not in scripts.ACQUIRE.lua  # the semaphore's alone
    assert "local function slot_of(" in scripts.ACQUIRE_SLOT.lua
    assert "local function pass_on(" not in scripts.ACQUIRE.lua  # a release's
    assert "local function live(" not in scripts.EXTEND.lua  # keep_alive( is not live(


def test_every_lua_file_ships_with_the_package() -> None:
    """The wheel and the image take the package data pyproject.toml names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["redlease"]
    files = [p.relative_to(LUA.parents[1]).as_posix() for p in LUA.rglob("*.lua")]
    assert len(files) > len(scripts.ALL_SCRIPTS)
    assert [f for f in files if not any(fnmatch(f, p) for p in patterns)] == []
    names = {p.stem for p in LUA.glob("*.lua")}
    assert names == {s.name for s in scripts.ALL_SCRIPTS}  # every script file is loaded


def _prim(kind: str = "mutex", **kw: object) -> Primitive:
    return Primitive(LockKeys.for_name("l"), Options(identity="me"), kind, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prim", "script"),
    [
        (_prim(), scripts.ACQUIRE),
        (_prim().with_direct(), scripts.ACQUIRE),
        (_prim("reentrant").on_quorum(), scripts.ACQUIRE),
        (_prim(limit=3), scripts.ACQUIRE_SLOT),
        (_prim(limit=3).with_direct(), scripts.ACQUIRE_SLOT),
        (_prim(group=(LockKeys.for_name("a"), LockKeys.for_name("b"))), scripts.ACQUIRE_MULTI),
        (_prim("read"), scripts.ACQUIRE_READ),
        (_prim("write"), scripts.ACQUIRE_WRITE),
    ],
    ids=["mutex", "direct", "quorum", "semaphore", "semaphore-direct", "multi", "read", "write"],
)
def test_each_kind_of_lease_sends_its_acquire_script(prim: Primitive, script: object) -> None:
    for registered in (False, True):
        call = prim.acquire("tok", 500, registered=registered)
        assert call.script is script and call.args[0] == "tok"


def test_the_semaphore_and_multi_scripts_take_their_keys_as_headed() -> None:
    """ACQUIRE_SLOT: the lock's five keys, the hand-off ones, the other slots last (ARGV[7]
    counts them); ACQUIRE_MULTI: five keys per lock, the registration flag fifth."""
    slot = _prim(limit=3).with_direct().acquire("tok", 500, registered=True)
    k = LockKeys.for_name("l")
    assert slot.keys == (
        k.lease, k.fence, k.history, k.waiters, k.handoff, k.direct, k.grants("tok"),
        *k.slots(3)[1:],
    )  # fmt: skip
    assert slot.args[4:7] == (0, "1", 2)
    multi = _prim(group=(LockKeys.for_name("a"), LockKeys.for_name("b"))).acquire("tok", 500)
    assert len(multi.keys) == 10 and multi.args[3:] == (500, "1")
