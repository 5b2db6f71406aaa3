"""Every subcommand's ``--help`` has a description, an example and its flags' defaults."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from redlease.cli import build_parser
from redlease.devtools.sidecarprocs import ROOT, env

COMMANDS = ("demo", "operator", "sidecar", "run", "status", "retire", "wait", "inject")


def _sub(name: str) -> argparse.ArgumentParser:
    action = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    parser: argparse.ArgumentParser = action.choices[name]
    return parser


@pytest.mark.parametrize("command", COMMANDS)
def test_help_describes_shows_an_example_and_defaults(command: str) -> None:
    sub = _sub(command)
    text = sub.format_help()
    assert sub.description and len(sub.description) > 40
    assert "example:\n  redlease " in text
    for action in sub._actions:
        default = None if action.dest in ("help", "version") else action.default
        if action.option_strings and default not in (None, False, "", []):
            shown = action.help or ""
            assert "default" in sub._get_formatter()._get_help_string(action), (
                action.option_strings,
                shown,
            )
        if action.option_strings and action.dest not in ("help", "version"):
            assert action.help, f"{command} {action.option_strings} has no help"


def test_help_runs_as_a_process() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "redlease", "run", "--help"],
        capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "--try" in out.stdout and "75" in out.stdout
