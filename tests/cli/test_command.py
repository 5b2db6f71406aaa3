"""A flag declared once: the command line wins over ``REDLEASE_<FLAG>``, which wins over the
declared default; a bad env value is one line naming the env var, and only for the command
that reads it."""

from __future__ import annotations

import argparse

import pytest

from redlease.cli.command import BadEnv, Command, Flag, add_command, bad_env

FLAGS = (
    Flag(("--ttl",), "lease duration", 15.0, float),
    Flag(("--paused",), "no new acquisitions", kind="switch"),
    Flag(("--redis",), "URLs", kind="list", metavar="URL"),
    Flag(("--ready",), "mode", "connected", choices=("connected", "leader")),
    Flag(("--namespace", "-n"), "namespaces", kind="list", group="scope"),
    Flag(("--all-namespaces", "-A"), "all", kind="switch", group="scope", clears="namespace"),
)


def parse(argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="t", exit_on_error=False)
    sub = parser.add_subparsers(dest="command", required=True)
    command = Command("x", "x", "x does x", "t x", FLAGS, run=lambda _: 0)
    add_command(sub, command, environ)
    return parser.parse_args(["x", *argv])


def test_flag_beats_env_beats_default() -> None:
    assert parse([], {}).ttl == 15.0
    assert parse([], {"REDLEASE_TTL": "30"}).ttl == 30.0
    assert parse(["--ttl", "9"], {"REDLEASE_TTL": "30"}).ttl == 9.0
    assert parse([], {"REDLEASE_PAUSED": "Yes"}).paused is True
    assert parse([], {"REDLEASE_PAUSED": "off"}).paused is False


def test_list_flags_on_the_command_line_replace_the_env_values() -> None:
    env = {"REDLEASE_REDIS": "redis://a, redis://b"}
    assert parse([], env).redis == ["redis://a", "redis://b"]
    assert parse(["--redis", "redis://c", "--redis", "redis://d"], env).redis == [
        "redis://c",
        "redis://d",
    ]
    assert parse([], {}).redis is None


def test_a_clearing_switch_on_the_command_line_empties_the_env_list() -> None:
    env = {"REDLEASE_NAMESPACE": "x,y"}
    assert parse(["-A"], env).namespace == []
    from_env = parse([], {**env, "REDLEASE_ALL_NAMESPACES": "1"})
    assert from_env.namespace == ["x", "y"] and from_env.all_namespaces is True


@pytest.mark.parametrize(
    ("environ", "line"),
    [
        ({"REDLEASE_TTL": "abc"}, "REDLEASE_TTL (for --ttl): invalid float: 'abc'"),
        ({"REDLEASE_PAUSED": "maybe"}, "REDLEASE_PAUSED (for --paused): invalid value: 'maybe'"),
        (
            {"REDLEASE_READY": "often"},
            "REDLEASE_READY (for --ready): 'often' is not one of connected, leader",
        ),
    ],
)
def test_a_bad_env_value_is_reported_once_parsed(environ: dict[str, str], line: str) -> None:
    args = parse([], environ)
    assert bad_env(args) == line
    name = next(iter(environ)).removeprefix("REDLEASE_").lower()
    assert isinstance(getattr(args, name), BadEnv)
    given = {"ttl": ["--ttl", "1"], "paused": ["--paused"], "ready": ["--ready", "leader"]}
    assert bad_env(parse(given[name], environ)) is None  # the command line wins


def test_help_shows_the_declared_default_and_the_env_var() -> None:
    ttl, paused, _, ready, *_ = FLAGS
    assert ttl.help_text() == "lease duration (default: 15) [env REDLEASE_TTL]"
    assert paused.help_text() == "no new acquisitions [env REDLEASE_PAUSED]"
    assert ready.help_text() == "mode (default: connected) [env REDLEASE_READY]"
