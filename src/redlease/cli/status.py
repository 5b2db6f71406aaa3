"""`redlease status`: one read of a lock's view, printed for people or as JSON.

Works with every node-set kind (one Redis, a Sentinel-managed master, a cluster, a RedLock set):
each node is read and the lock view (:mod:`redlease.core.view`) decides what to show, exactly
as the sidecar's ``/status`` and the operator do.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from typing import Any

from redlease.cli import flags
from redlease.cli.command import Command, Flag
from redlease.core import view as lockview
from redlease.core.connect import Target, connect_target
from redlease.core.observe import read_view
from redlease.core.view import LockView

READ_TIMEOUT = 3.0


def describe(view: LockView) -> dict[str, Any]:
    """The printable status of a lock (pure): the status document's lock part plus the
    counters only a direct read has."""
    doc: dict[str, Any] = {
        "lock": view.lock,
        "keys": list(view.keys),
        **lockview.document(view),
        "last_fencing_token": view.last_fence,
        "candidates": list(view.candidates),
        "waiters": view.waiters,
    }
    if view.errors:
        doc["unhealthy"] = dict(view.errors)
    actions = {n: o.action for n, o in view.outside.items() if o.action}
    if actions:
        doc["operator_action"] = actions
    return doc


def render(doc: dict[str, Any]) -> str:
    nodes = doc["nodes"]
    ttl = doc["expires_in_ms"]
    holder = doc["holder"] or ("(unknown)" if doc["holder_unknown"] else "(free)")
    rows = [
        ("lock", doc["lock"] if len(doc["keys"]) == 1 else ", ".join(doc["keys"])),
        ("holder", holder),
        ("fencing token", doc["fencing_token"] if doc["fencing_token"] is not None else "-"),
        ("ttl left", f"{ttl / 1000:.3f}s" if ttl is not None else "-"),
        ("acquired at", doc["acquired_at"] or "-"),
        ("renewed at", doc["renewed_at"] or "-"),
        ("transitions", doc["transitions"]),
        ("candidates", ", ".join(doc["candidates"]) or "-"),
        ("nodes healthy", f"{nodes['healthy']}/{nodes['total']} (quorum {nodes['quorum']})"),
    ]
    if doc["holder_unknown"]:
        rows.append(("why unknown", doc["holder_unknown"]))
    for node, why in (doc.get("unhealthy") or {}).items():
        rows.append(("unreachable", f"{node}: {why}"))
    for node, why in doc["nodes_not_counting"].items():
        rows.append(("not counting", f"{node}: {why}"))
    for node, action in (doc.get("operator_action") or {}).items():
        rows.append(("to bring back", f"{node}: {action}"))
    return "\n".join(f"{k + ':':<15}{v}" for k, v in rows)


async def read(keys: Sequence[str], target: Target) -> LockView:
    client = connect_target(target, asyncio=True, socket_timeout=READ_TIMEOUT)
    try:
        return await read_view(client, keys, target.quorum, READ_TIMEOUT)
    finally:
        await close_client(client)


async def close_client(client: Any) -> None:
    """Close a client, or every client of a node set."""
    for c in getattr(client, "clients", None) or [client]:
        with contextlib.suppress(Exception):
            await c.aclose()


def show_status(keys: Sequence[str], target: Target, *, as_json: bool = False) -> int:
    """Print the view; exit 0, or 1 when no quorum of nodes could be read."""
    started = time.monotonic()
    view = asyncio.run(read(keys, target))
    doc = describe(view)
    doc["read_ms"] = round((time.monotonic() - started) * 1000, 1)
    print(json.dumps(doc, indent=2) if as_json else render(doc))
    return 0 if view.nodes.reachable else 1


def main(args: argparse.Namespace) -> int:
    return show_status(flags.lock_keys(args), flags.target(args), as_json=args.json)


COMMAND = Command(
    name="status",
    summary="holder, fencing token, TTL left, nodes healthy",
    description="One read of a lock: holder, fencing token, TTL left, nodes healthy. Exit 1 "
    "when Redis cannot be read.",
    example="redlease status --lock orders --redis redis://redis:6379/0 --json",
    flags=(*flags.CONNECTION, Flag(("--json",), "print JSON", kind="switch")),
    run=main,
    credentials=True,
)
