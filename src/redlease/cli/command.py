"""A subcommand and its flags, declared once; every flag also reads ``REDLEASE_<FLAG>``.

Each command module declares a :class:`Command`: its help, its :class:`Flag` table and the
function that runs it. :func:`add_command` turns the table into argparse arguments and reads
the environment while doing so: a set ``REDLEASE_<FLAG>`` (``--renew-deadline`` ->
``REDLEASE_RENEW_DEADLINE``; booleans ``true/false``; lists comma-separated) becomes that flag's
default. Hence the command line wins over the environment, and the environment over the
declared default. A bad env value becomes a :class:`BadEnv` default and is reported, in one
line naming the env var, by :func:`bad_env` only for the command that reads it
(tests/sidecar/test_cli.py).
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from redlease.kube.sidecar_args import env_name

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: its names (the longest names the env var), help, default and parser.

    ``kind``: ``value`` (one value, ``parse`` converts it), ``switch`` (store true) or ``list``
    (repeatable; the command line's values replace the environment's). Flags sharing a
    ``group`` exclude each other. A switch with ``clears`` given on the command line also
    empties that flag's environment values (``-A`` beats ``REDLEASE_NAMESPACE``).
    """

    names: tuple[str, ...]
    help: str
    default: Any = None
    parse: Callable[[str], Any] | None = None
    kind: Literal["value", "switch", "list"] = "value"
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    dest: str | None = None
    group: str | None = None
    clears: str | None = None
    required: bool = False  # on the command line (its env var does not count)

    @property
    def name(self) -> str:
        return max(self.names, key=len)

    @property
    def env(self) -> str:
        return env_name(self.name)

    def help_text(self) -> str:
        """The help line: the text, the default unless the text says it, the env var."""
        text = self.help
        shown = self.default not in (None, False, [])
        if shown and "default" not in text:
            value = f"{self.default:g}" if isinstance(self.default, float) else self.default
            text += f" (default: {'off' if value == '' else value})"
        return f"{text} [env {self.env}]".replace("%", "%%")

    def from_env(self, environ: Mapping[str, str]) -> Any:
        """The default this flag starts with: its env var's value, else the declared one."""
        raw = environ.get(self.env)
        if raw is None:
            return self.default
        where = f"{self.env} (for {self.name})"
        if self.kind == "switch":
            word = raw.strip().lower()
            if word in TRUE or word in FALSE:
                return word in TRUE
            return BadEnv(f"{where}: invalid value: {raw!r}")
        if self.kind == "list":
            return [part for part in re.split(r"[,\s]+", raw) if part]
        try:
            value = self.parse(raw) if self.parse is not None else raw
        except (TypeError, ValueError):
            kind = getattr(self.parse, "__name__", "value")
            return BadEnv(f"{where}: invalid {kind}: {raw!r}")
        if self.choices is not None and value not in self.choices:
            return BadEnv(f"{where}: {raw!r} is not one of {', '.join(self.choices)}")
        return value


@dataclass(frozen=True, slots=True)
class BadEnv:
    """A flag's env var that does not parse: the one line that says so."""

    message: str


@dataclass(frozen=True, slots=True)
class Command:
    """A ``redlease`` subcommand: its help (``summary`` in ``redlease --help``; description,
    example and every flag's default in its own), its flags and what runs it.
    ``credentials``: it holds Redis credentials or Secrets for its whole run (not dumpable);
    ``exit_at_once``: the process ends when it returns, without the interpreter's teardown."""

    name: str
    summary: str
    description: str
    example: str
    flags: Sequence[Flag]
    run: Callable[[argparse.Namespace], int]
    credentials: bool = False
    positionals: Callable[[argparse.ArgumentParser], None] | None = None
    exit_at_once: bool = False  # the program ends as soon as it returns (redlease.cli.main)


class Arguments(Protocol):
    """A parser or an argument group: where flags are added."""

    def add_argument(self, *names: str, **options: Any) -> argparse.Action: ...


class Subcommands(Protocol):
    """What ``add_subparsers`` returns: where commands are added."""

    def add_parser(self, name: str, **options: Any) -> argparse.ArgumentParser: ...


class _Repeat(argparse.Action):
    """A repeatable flag whose command-line values replace its default (the env var's)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        items = getattr(namespace, self.dest, None)
        kept = [] if items is None or items is self.default else list(items)
        setattr(namespace, self.dest, [*kept, values])


class _ClearingSwitch(argparse.Action):
    """``store_true`` that also empties another flag's environment values (``Flag.clears``)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, clears: str, **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)
        self.clears = clears

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True)
        setattr(namespace, self.clears, [])


def add_flag(parser: Arguments, flag: Flag, environ: Mapping[str, str]) -> None:
    """Add ``flag`` to ``parser`` (or a group of it), its default read from ``environ``."""
    options: dict[str, Any] = {"help": flag.help_text(), "default": flag.from_env(environ)}
    if flag.dest is not None:
        options["dest"] = flag.dest
    if flag.required:
        options["required"] = True
    if flag.kind == "switch":
        if flag.clears is not None:
            options.update(action=_ClearingSwitch, clears=flag.clears)
        else:
            options["action"] = "store_true"
    else:
        options.update(type=flag.parse, choices=flag.choices, metavar=flag.metavar)
        if flag.kind == "list":
            options["action"] = _Repeat
    parser.add_argument(*flag.names, **options)


def add_command(
    sub: Subcommands,
    command: Command,
    environ: Mapping[str, str],
) -> argparse.ArgumentParser:
    """``command``'s parser under ``sub``, with its help, example and flags."""
    parser = sub.add_parser(
        command.name,
        help=command.summary,
        description=textwrap.fill(command.description, 88),
        epilog=f"example:\n  {command.example}",
    )
    groups: dict[str, Arguments] = {}
    for flag in command.flags:
        target: Arguments = parser
        if flag.group is not None:
            if flag.group not in groups:
                groups[flag.group] = parser.add_mutually_exclusive_group()
            target = groups[flag.group]
        add_flag(target, flag, environ)
    if command.positionals is not None:
        command.positionals(parser)
    return parser


def bad_env(args: argparse.Namespace) -> str | None:
    """The first env var of the chosen command that did not parse, as its error line."""
    for value in vars(args).values():
        if isinstance(value, BadEnv):
            return value.message
    return None
