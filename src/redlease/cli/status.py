"""`redlease status`: one read of a lock's view, printed for people or as JSON.

Works with every node-set kind (one Redis, a Sentinel-managed master, a cluster, a RedLock set):
each node is read and the lock view (:mod:`redlease.core.view`) decides what to show, exactly
as the sidecar's ``/status`` and the operator do.

``--http ADDRESS`` asks a sidecar instead (its ``/status``: the same view, plus what that sidecar
knows of itself); ``--watch`` (with ``--http``) prints the document again each time it changes,
by the sidecar's long-poll (:mod:`redlease.cli.longpoll`): a watch that read Redis would have to
poll it, the sidecar already reads it and says when something changed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from redlease.cli import flags
from redlease.cli.command import Command, Flag
from redlease.cli.longpoll import Unreadable, follow, get, status_url
from redlease.core import view as lockview
from redlease.core.connect import Target, connect_target
from redlease.core.observe import read_view
from redlease.core.view import LockView
from redlease.errors import ConfigError
from redlease.kube import sidecar_args as sa

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
    if never_used(view):
        doc["never_used"] = True
    if view.errors:
        doc["unhealthy"] = dict(view.errors)
    actions = {n: o.action for n, o in view.outside.items() if o.action}
    if actions:
        doc["operator_action"] = actions
    return doc


def never_used(view: LockView) -> bool:
    """True when a quorum answered and no lease was ever granted under this name (pure): no
    fence counter, no history, nobody holding, waiting or campaigning; most often a misspelt
    lock name, which would otherwise read as an ordinary "(free)"."""
    return (
        view.nodes.reachable
        and view.unknown is None
        and not view.held
        and view.last_fence == 0
        and view.transitions == 0
        and view.last_transition_ms is None
        and not view.candidates
        and view.waiters == 0
    )


def render(doc: dict[str, Any]) -> str:
    """A status document for people: a direct read's (:func:`describe`) or a sidecar's."""
    nodes = doc.get("nodes") or {"healthy": 0, "total": 0, "quorum": 0}
    ttl = doc.get("expires_in_ms")
    keys = doc.get("keys") or [doc.get("lock")]
    holder = doc.get("holder") or ("(unknown)" if doc.get("holder_unknown") else "(free)")
    if doc.get("never_used"):
        holder = "(free: never used: no fence counter or history under this name; check it)"
    candidates = doc.get("candidates")
    rows: list[tuple[str, Any]] = [("lock", doc.get("lock") if len(keys) == 1 else ", ".join(keys))]
    if "identity" in doc:  # a sidecar's document: who answered
        role = "leader" if doc.get("leader") else "not leader"
        rows.append(("this sidecar", f"{doc['identity']} ({role})"))
    rows += [
        ("holder", holder),
        ("fencing token", doc.get("fencing_token") or "-"),
        ("ttl left", f"{ttl / 1000:.3f}s" if ttl is not None else "-"),
        ("acquired at", doc.get("acquired_at") or "-"),
        ("renewed at", doc.get("renewed_at") or "-"),
        ("transitions", doc.get("transitions", "-")),
        ("candidates", ", ".join(candidates) if isinstance(candidates, list) else candidates),
        ("nodes healthy", f"{nodes['healthy']}/{nodes['total']} (quorum {nodes['quorum']})"),
    ]
    if (doc.get("holders_limit") or 1) > 1 or len(doc.get("holders") or []) > 1:
        rows.append(("holders", _holders(doc)))
    if doc.get("holder_unknown"):
        rows.append(("why unknown", doc["holder_unknown"]))
    for node, why in (doc.get("unhealthy") or {}).items():
        rows.append(("unreachable", f"{node}: {why}"))
    for node, why in (doc.get("nodes_not_counting") or {}).items():
        rows.append(("not counting", f"{node}: {why}"))
    for node, action in (doc.get("operator_action") or {}).items():
        rows.append(("to bring back", f"{node}: {action}"))
    if "version" in doc:
        rows.append(("version", doc["version"]))
    return "\n".join(f"{k + ':':<15}{'-' if v in (None, '') else v}" for k, v in rows)


def _holders(doc: dict[str, Any]) -> str:
    """Every holder of a semaphore (docs/holders.md): ``pod-0 (token 7, 2.100s), ...``."""
    parts = []
    for h in doc.get("holders") or []:
        left = h.get("expires_in_ms")
        ttl = f", {left / 1000:.3f}s" if left is not None else ""
        parts.append(f"{h.get('holder')} (token {h.get('fencing_token')}{ttl})")
    limit = doc.get("holders_limit")
    count = f"{len(parts)} of {limit}" if limit else f"{len(parts)}"
    return f"{count}: {', '.join(parts)}" if parts else f"{count}"


async def read(keys: Sequence[str], target: Target, holders: int = 1) -> LockView:
    client = connect_target(target, asyncio=True, socket_timeout=READ_TIMEOUT)
    try:
        return await read_view(client, keys, target.quorum, READ_TIMEOUT, limit=holders)
    finally:
        await close_client(client)


async def close_client(client: Any) -> None:
    """Close a client, or every client of a node set."""
    for c in getattr(client, "clients", None) or [client]:
        with contextlib.suppress(Exception):
            await c.aclose()


def show_status(
    keys: Sequence[str], target: Target, *, as_json: bool = False, holders: int = 1
) -> int:
    """Print the view (``holders`` > 1: a semaphore's, every holder); exit 0, or 1 when no
    quorum of nodes could be read."""
    started = time.monotonic()
    view = asyncio.run(read(keys, target, holders))
    doc = describe(view)
    if holders > 1:
        doc["holders_limit"] = holders
    doc["read_ms"] = round((time.monotonic() - started) * 1000, 1)
    print(json.dumps(doc, indent=2) if as_json else render(doc))
    return 0 if view.nodes.reachable else 1


def show_sidecar(url: str, *, as_json: bool = False) -> int:
    """Print a sidecar's status document; exit 1 when it cannot be read."""
    doc = get(url)
    if not isinstance(doc, dict):
        why = doc.reason if isinstance(doc, Unreadable) else "not a status document"
        print(f"redlease: cannot read {url}: {why}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if as_json else render(doc))
    return 0


def watch(url: str, *, as_json: bool = False) -> int:
    """Print the sidecar's status document now and after each change (one JSON line each with
    ``as_json``), until interrupted; say once while it cannot be read."""
    why: str | None = None
    for doc in follow(url):
        if not isinstance(doc, dict):
            reason = doc.reason if isinstance(doc, Unreadable) else "not a status document"
            if reason != why:
                print(f"redlease: cannot read {url}: {reason}; retrying", file=sys.stderr,
                      flush=True)  # fmt: skip
            why = reason
            continue
        why = None
        print(json.dumps(doc, sort_keys=True) if as_json else render(doc) + "\n", flush=True)
    return 0  # follow() without a deadline never ends


def main(args: argparse.Namespace) -> int:
    # --redis wins over --http (either may come from the environment: a sidecar's container
    # carries REDLEASE_HTTP for its own port), except for --watch, which needs the sidecar
    if args.http is not None and (args.watch or not args.redis):
        url = status_url(args.http)
        return watch(url, as_json=args.json) if args.watch else show_sidecar(url, as_json=args.json)
    if args.watch:
        raise ConfigError("--watch", "needs --http (the sidecar's address): it long-polls /status")
    from redlease.sidecar.config import check_holders

    keys = flags.lock_keys(args)
    holders = check_holders(args.holders, keys, sa.HOLDERS)
    return show_status(keys, flags.target(args), as_json=args.json, holders=holders)


COMMAND = Command(
    name="status",
    summary="holder, fencing token, TTL left, nodes healthy",
    description="One read of a lock: holder, fencing token, TTL left, nodes healthy. Exit 1 "
    "when Redis cannot be read. With --http and no --redis, a sidecar's /status instead of "
    "Redis; --watch prints it again at each change (the sidecar's "
    "long-poll: no polling), one JSON line per change with --json.",
    example="redlease status --lock orders --redis redis://redis:6379/0 --json\n"
    "  redlease status --http 127.0.0.1:4040 --watch --json",
    flags=(
        *flags.CONNECTION,
        Flag(("--json",), "print JSON", kind="switch"),
        Flag((sa.HTTP,), f"read this sidecar's /status, e.g. {sa.DEFAULT_HTTP}", metavar="URL"),
        Flag(("--watch",), "with --http: print each change until interrupted", kind="switch"),
        Flag(
            (sa.HOLDERS,),
            "the lock is a semaphore of N holders (a sidecar's --holders): read and list "
            "every holder",
            1,
            flags.count,
            metavar="N",
        ),
    ),
    run=main,
    credentials=True,
)
