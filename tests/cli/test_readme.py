"""The README says what the code does: `redlease run`'s exit-status table, the default TTLs, the
install extras and every flag its `redlease ...` lines use, compared with the constants and
parsers in `redlease.cli` (a new exit status, flag or default must be written down; a flag
renamed in the code must be renamed in the README)."""

from __future__ import annotations

import argparse
import inspect
import re
import shlex
import tomllib

import pytest

import redlease
import redlease.aio
from redlease.cli import _EXTRAS, COMMANDS, build_parser, run, runspec
from redlease.core.primitives import Options
from redlease.core.timing import DEFAULT_TTL
from redlease.devtools.sidecarprocs import ROOT

README = (ROOT / "README.md").read_text()


def exit_table() -> dict[int, str]:
    """`redlease run`'s table: exit status -> meaning."""
    start = README.index("| exit status | meaning |")
    rows: dict[int, str] = {}
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        code, meaning = (cell.strip() for cell in line.strip("|").split("|", 1))
        rows[int(code)] = meaning
    return rows


def test_the_exit_status_table_is_runs_own() -> None:
    own = {
        runspec.BAD_INPUT: "bad input",
        runspec.UNAVAILABLE: "Redis not reached",
        runspec.NOT_ACQUIRED: "held by another",
        runspec.LEASE_LOST: "lease was lost",
        runspec.NOT_EXECUTABLE: "not executable",
        runspec.NOT_FOUND: "not found",
    }
    table = exit_table()
    assert set(table) == set(own)
    for code, words in own.items():
        assert words in table[code], (code, table[code])
    assert "--conflict-exit-code" in table[runspec.NOT_ACQUIRED]
    for code in own:  # `redlease run --help` says them too
        assert str(code) in run.COMMAND.description, code


def test_the_default_ttls_are_the_codes() -> None:
    found = re.search(r"\*\*Default TTL: (\d+) s\*\* everywhere", README)
    assert found is not None, "the README's default TTL line"
    ttl_flag = next(f for f in run.COMMAND.flags if f.name == "--ttl")
    crd = (ROOT / "crds" / "distributedlock.yaml").read_text()
    ttl_seconds = re.search(r"ttlSeconds:(?:\n +\w.*)*?\n +default: (\d+)", crd)
    assert ttl_seconds is not None, "the CRD's ttlSeconds default"
    assert int(found.group(1)) == DEFAULT_TTL == ttl_flag.default == int(ttl_seconds.group(1))
    assert Options().ttl == DEFAULT_TTL
    for cls in (redlease.Lock, redlease.Semaphore, redlease.MultiLock, redlease.aio.Lock,
                redlease.Elector, redlease.aio.Elector):  # fmt: skip
        assert inspect.signature(cls).parameters["ttl"].default == DEFAULT_TTL, cls


def test_the_install_lines_name_real_extras() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = set(re.findall(r"pip install 'redlease\[(\w+)\]'", README))
    assert named <= set(extras) and set(_EXTRAS.values()) <= named
    assert "pip install redlease " in README


def redlease_lines() -> list[list[str]]:
    """The words of every `redlease COMMAND ...` line in the README's code (blocks and spans),
    without comments, pipes and shell continuations."""
    found, fence = [], None
    for line in README.replace("\\\n", " ").splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:]
        elif fence in ("sh", "console", ""):
            found.append(line)
    found += re.findall(r"`(redlease [^`]+)`", README)
    lines = []
    for line in found:
        line = line.strip().removeprefix("$ ")
        for part in re.split(r"&&|\|\||\||;|&(?!\w)", line.split("#")[0]):
            text = part.replace("[", " ").replace("]", " ")
            try:
                words = shlex.split(text)
            except ValueError:  # prose with an apostrophe
                words = text.split()
            if len(words) >= 2 and words[0] == "redlease" and words[1] in COMMANDS:
                lines.append(words)
    return lines


def test_every_flag_the_readme_uses_exists() -> None:
    lines = redlease_lines()
    assert len(lines) >= 10
    parser = build_parser({})
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for words in lines:
        options = sub.choices[words[1]]._option_string_actions
        for word in words[2:]:
            if word == "--":
                break
            if word.startswith("--"):
                assert word.partition("=")[0] in options, (" ".join(words), word)


@pytest.mark.parametrize("flag", [f.name for f in run.OWN])
def test_every_flag_of_run_is_in_the_readme(flag: str) -> None:
    assert f"`{flag}" in README or f" {flag} " in README, flag
