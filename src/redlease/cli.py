"""The `redlease` command: the only place that reads argv and ``REDLEASE_*`` env vars.

Each subcommand registers its flags here and hands validated settings to its package.
User mistakes end with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from redlease import __version__
from redlease.errors import ConfigError, RedleaseError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the flag (exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"redlease: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="redlease", description="Leader election and locks on Redis.")
    parser.add_argument("--version", action="version", version=f"redlease {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="contenders taking turns on a local redis-server")
    demo.add_argument("--contenders", type=int, default=3)
    demo.add_argument("--rounds", type=int, default=3)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from redlease.demo import run_demo

            return run_demo(contenders=args.contenders, rounds=args.rounds)
        parser.error(f"unknown command {args.command!r}")
    except ConfigError as exc:
        sys.stderr.write(f"redlease: error: {exc}\n")
        return 2
    except RedleaseError as exc:
        sys.stderr.write(f"redlease: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
