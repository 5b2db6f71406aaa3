"""The `redlease` command: the only place that reads argv and ``REDLEASE_*`` env vars.

Each subcommand is a :class:`~redlease.cli.command.Command` in a module of its own (flags,
config builder, what runs it); this module builds the parser from them and dispatches.
User mistakes end with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from redlease import __version__
from redlease.cli import (
    demo,
    inject,
    operator,
    retire,
    run,
    sidecar,
    status,
    suggest,
    validate,
    wait,
)
from redlease.cli.command import Command, add_command, bad_env
from redlease.cli.undumpable import make_undumpable
from redlease.errors import ConfigError, RedleaseError

# In `redlease --help` order.
COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        demo.COMMAND,
        operator.COMMAND,
        sidecar.COMMAND,
        run.COMMAND,
        status.COMMAND,
        retire.COMMAND,
        wait.COMMAND,
        inject.COMMAND,
        validate.COMMAND,
    )
}

# optional dependencies -> the extra that installs them (pyproject.toml)
_EXTRAS = {
    "kopf": "operator",
    "yaml": "operator",
    "jsonpatch": "operator",
    "aiohttp": "sidecar",
    "prometheus_client": "sidecar",
}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the flag (exit 2); the examples in the
    epilog keep their lines."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"redlease: error: {suggest.with_choice_hint(message)}\n")
        raise SystemExit(2)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; flag defaults come from ``environ`` (the process's)."""
    parser = _Parser(prog="redlease", description="Leader election and locks on Redis.")
    parser.add_argument("--version", action="version", version=f"redlease {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS.values():
        add_command(sub, command, os.environ if environ is None else environ)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """``argv`` parsed, flags filled from the environment; a bad env var exits 2 in one line."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # a misspelled flag: name the closest real one
        parser.error(suggest.unrecognized(extras, _options(parser, args.command)))
    problem = bad_env(args)
    if problem is not None:
        parser.error(problem)
    return args


def _options(parser: argparse.ArgumentParser, command: str) -> list[str]:
    """Every flag of ``command`` (and the program's own)."""
    names = list(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            names += list(action.choices[command]._option_string_actions)
    return names


def main(argv: Sequence[str] | None = None, *, exit_at_once: bool = False) -> int:
    """Run the command of ``argv``; its exit status. ``exit_at_once`` (the program, not a
    caller in-process): a command that asks for it (`redlease run`) ends the process as soon as
    it returns, without the interpreter's teardown of some 560 modules (50 to 150 ms), so that a
    job under `run` ends within milliseconds of its COMMAND."""
    args = parse_args(argv)
    command = COMMANDS[args.command]
    if command.credentials:
        make_undumpable()
    try:
        code = command.run(args)
        if exit_at_once and command.exit_at_once:
            _exit_now(code)
        return code
    except ConfigError as exc:
        sys.stderr.write(f"redlease: error: {exc}\n")
        return 2
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            raise
        sys.stderr.write(
            f"redlease: error: redlease {args.command} needs the {extra!r} extra "
            f"({exc.name} is not installed): pip install 'redlease[{extra}]'\n"
        )
        return 2
    except RedleaseError as exc:
        sys.stderr.write(f"redlease: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_left()


def _reader_left() -> int:
    """stdout's reader went away (``redlease status ... | head``): end quietly, as a program
    killed by SIGPIPE would (128 + 13), with no traceback and no complaint at exit about the
    unflushed rest (stdout now writes to /dev/null)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13


def _exit_now(code: int) -> None:
    """Flush what was written and end the process with ``code`` (no interpreter teardown: the
    command closed its connections and released its leases already)."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def program() -> None:
    """The ``redlease`` program (console script and ``python -m redlease``)."""
    try:
        code = main(exit_at_once=True)
        sys.stdout.flush()  # here, not at exit: a reader that left is then caught below
    except BrokenPipeError:
        code = _reader_left()
    raise SystemExit(code)


if __name__ == "__main__":  # pragma: no cover
    program()
