"""`redlease wait`: block an application's entrypoint until its pod's sidecar leads.

Reads the sidecar's state file, every ``--interval``, or long-polls its ``/status`` endpoint
(:mod:`redlease.cli.longpoll`: answered as soon as the sidecar publishes a change). Leader only
while ``leader`` is true *and* ``leader_until`` is still ahead, so a file left by a frozen
sidecar, or one it could not rewrite, does not count.
Exit 0 once leader; 1 on timeout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redlease.cli.command import Command, Flag
from redlease.cli.longpoll import Unreadable, follow, status_url
from redlease.core.durations import positive_duration
from redlease.errors import ConfigError
from redlease.kube import sidecar_args as sa
from redlease.sidecar.statefile import file_name, until_epoch


@dataclass(frozen=True, slots=True)
class Source:
    """Where to read the status document: a file path or an HTTP URL."""

    path: Path | None = None
    url: str | None = None

    def __str__(self) -> str:
        return str(self.path) if self.path else str(self.url)


def resolve_source(
    state_file: str | None, state_dir: str | None, lock: str | None, http: str | None
) -> Source:
    if sum(x is not None for x in (state_file, state_dir, http)) != 1:
        raise ConfigError("--state-file", "give exactly one of --state-file, --state-dir, --http")
    if state_file:
        return Source(path=Path(state_file))
    if state_dir is not None:
        if not lock:
            raise ConfigError("--lock", "is required with --state-dir")
        return Source(path=Path(state_dir) / file_name(lock))
    assert http is not None
    return Source(url=status_url(http))


def is_leader(doc: Any, now: float | None = None) -> bool:
    """True if the status document claims leadership that has not run out (pure). A claim
    without a readable ``leader_until`` promises nothing, so it does not count."""
    if not isinstance(doc, dict) or doc.get("leader") is not True:
        return False
    end = until_epoch(doc.get("leader_until"))
    return end is not None and (time.time() if now is None else now) < end


def read(path: Path) -> Any:
    """The state file's document, or an :class:`Unreadable` saying why there is none."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        if not path.parent.is_dir():
            where = path.parent
            return Unreadable(f"directory {where} does not exist (the sidecar's --state-dir?)")
        return Unreadable("no such file yet (the sidecar writes it once it runs)")
    except OSError as exc:
        return Unreadable(exc.strerror or str(exc))
    except ValueError:
        return Unreadable("not JSON (a redlease sidecar's state file?)")


def documents(source: Source, deadline: float | None, interval: float) -> Iterator[Any]:
    """The status documents to look at until ``deadline``: the sidecar's after each change
    (long-poll), or the state file every ``interval``."""
    if source.url is not None:
        yield from follow(source.url, until=deadline, interval=interval)
        return
    assert source.path is not None
    while True:
        yield read(source.path)
        if deadline is not None and time.monotonic() >= deadline:
            return
        time.sleep(interval if deadline is None else min(interval, deadline - time.monotonic()))


def wait_for_leader(source: Source, *, timeout: float | None, interval: float) -> int:
    """Exit status of waiting until ``source`` says this pod leads: what it waits for is said
    once, and why it cannot see it once per new reason (then it retries, quietly)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    why: str | None = None
    for doc in documents(source, deadline, interval):
        if is_leader(doc):
            print(
                f"leader: {doc.get('identity')} holds {doc.get('lock')!r} "
                f"with fencing token {doc.get('fencing_token')}",
                flush=True,
            )
            return 0
        if not told:
            told = True
            limit = "no timeout" if timeout is None else f"timeout {timeout:g}s"
            _say(f"waiting until {source} says this pod leads ({limit})")
        if isinstance(doc, Unreadable):
            if doc.reason != why:
                _say(f"cannot read {source}: {doc.reason}; retrying every {interval:g}s")
            why = doc.reason
        elif why is not None:
            why = None
            _say(f"{source} is readable again")
    assert timeout is not None
    because = f": {why}" if why else ""
    _say(f"not leader within {timeout:g}s ({source}{because})")
    return 1


def _say(line: str) -> None:
    sys.stderr.write(f"redlease: {line}\n")
    sys.stderr.flush()


def main(args: argparse.Namespace) -> int:
    source = resolve_source(args.state_file, args.state_dir, args.lock, args.http)
    return wait_for_leader(source, timeout=args.timeout, interval=args.interval)


COMMAND = Command(
    name="wait",
    summary="block until this pod's sidecar leads",
    description="Block until this pod's sidecar leads (its state file or /status says so and "
    "leader_until is ahead). With --http it long-polls /status (woken by the sidecar's change, "
    "no polling). Exit 0 once leader, 1 on --timeout.",
    example="redlease wait --state-dir /var/run/redlease --lock orders && exec ./app",
    flags=(
        Flag(("--state-file",), "the sidecar's <lock>.json", metavar="PATH"),
        Flag((sa.STATE_DIR_FLAG,), "with --lock: DIR/<lock>.json", metavar="DIR"),
        Flag(("--lock",), "with --state-dir: the lock whose DIR/<lock>.json to read"),
        Flag((sa.HTTP,), f"the sidecar's address, e.g. {sa.DEFAULT_HTTP}", metavar="URL"),
        Flag(
            ("--timeout",),
            "give up after (default: never)",
            parse=positive_duration,
            metavar="DURATION",
        ),
        Flag(
            ("--interval",),
            "poll period of the state file (--http long-polls: it retries only while the "
            "sidecar cannot be read, at this period)",
            0.2,
            positive_duration,
            metavar="DURATION",
        ),
    ),
    run=main,
)
