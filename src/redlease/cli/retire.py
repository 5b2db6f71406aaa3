"""`redlease retire --lock NAME --redis URL ... --yes`: delete the keys of a lock nobody uses.

See :mod:`redlease.core.admin`. Prints one line per node; exit 0 when every node retired the
lock, 1 otherwise (nothing is deleted anywhere unless every node answered and the lock is free).
"""

from __future__ import annotations

import argparse
import asyncio

from redlease.cli import flags
from redlease.cli.command import Command, Flag
from redlease.cli.status import READ_TIMEOUT, close_client
from redlease.core.admin import retire
from redlease.core.connect import Target, connect_target
from redlease.errors import ConfigError


async def _retire(name: str, target: Target) -> tuple[dict[str, str], bool]:
    client = connect_target(target, asyncio=True, socket_timeout=READ_TIMEOUT)
    try:
        result = await retire(client, name, target.quorum, READ_TIMEOUT)
        return result.per_node, result.done
    finally:
        await close_client(client)


def retire_lock(name: str, target: Target, *, yes: bool) -> int:
    if not yes:
        raise ConfigError(
            "--yes",
            f"retiring {name!r} deletes its fence counter: a later lock of the same name starts "
            "its fencing tokens again from the Redis server's clock (above the old ones only "
            "while that clock does not step back); add --yes if the name is gone for good",
        )
    per_node, done = asyncio.run(_retire(name, target))
    for node, what in per_node.items():
        print(f"{node}: {what}")
    return 0 if done else 1


def main(args: argparse.Namespace) -> int:
    return retire_lock(flags.lock_keys(args)[0], flags.target(args), yes=args.yes)


COMMAND = Command(
    name="retire",
    summary="delete the keys of a lock nobody uses any more",
    description="Delete the keys of a lock nobody uses any more (its fence counter too). "
    "Refused while the lock is held or a node does not answer.",
    example="redlease retire --lock old-job --redis redis://redis:6379/0 --yes",
    flags=(*flags.CONNECTION, Flag(("--yes",), "yes, its fence counter goes too", kind="switch")),
    run=main,
    credentials=True,
)
