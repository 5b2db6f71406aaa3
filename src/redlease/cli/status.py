"""`redlease status`: one read of a lock's live state, printed for people or as JSON."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from redlease.core import _async
from redlease.core.connect import connect
from redlease.core.keys import LockKeys
from redlease.core.state import LockState, read_state_flow
from redlease.errors import LockError
from redlease.sidecar.config import RedisTarget
from redlease.sidecar.election import empty_status, holder_fields


def describe(state: LockState | None, target: RedisTarget, error: str | None) -> dict[str, Any]:
    """The printable status of a lock (pure)."""
    healthy = 0 if state is None else target.total
    doc: dict[str, Any] = {
        "lock": state.name if state else None,
        **empty_status(target.total, healthy, target.needed),
        "last_fencing_token": 0,
        "candidates": [],
        "waiters": 0,
    }
    if error:
        doc["error"] = error
    if state is not None:
        doc.update(
            holder_fields(state, state.expires_in_ms),
            transitions=state.transitions,
            last_fencing_token=state.last_fence,
            candidates=list(state.candidates),
            waiters=state.waiters,
        )
    return doc


def render(doc: dict[str, Any]) -> str:
    nodes = doc["nodes"]
    ttl = doc["expires_in_ms"]
    rows = [
        ("lock", doc["lock"]),
        ("holder", doc["holder"] or "(free)"),
        ("fencing token", doc["fencing_token"] if doc["fencing_token"] is not None else "-"),
        ("ttl left", f"{ttl / 1000:.3f}s" if ttl is not None else "-"),
        ("acquired at", doc["acquired_at"] or "-"),
        ("renewed at", doc["renewed_at"] or "-"),
        ("transitions", doc["transitions"]),
        ("candidates", ", ".join(doc["candidates"]) or "-"),
        ("nodes healthy", f"{nodes['healthy']}/{nodes['total']} (quorum {nodes['quorum']})"),
    ]
    if doc.get("error"):
        rows.append(("error", doc["error"]))
    return "\n".join(f"{k + ':':<15}{v}" for k, v in rows)


async def read(lock: str, target: RedisTarget) -> tuple[LockState | None, str | None]:
    client = connect(
        target.urls,
        asyncio=True,
        cluster=target.cluster,
        username=target.username,
        password=target.password,
        socket_timeout=3.0,
    )
    try:
        node = _async.AsyncNode(client, lock)
        state = await _async.drive(node, read_state_flow(LockKeys.for_name(lock)))
        return state, None
    except LockError as exc:
        return None, str(exc)
    finally:
        await client.aclose()


def show_status(lock: str, target: RedisTarget, *, as_json: bool = False) -> int:
    """Print the state; exit 0, or 1 (with the error) when Redis could not be read."""
    started = time.monotonic()
    state, error = asyncio.run(read(lock, target))
    doc = describe(state, target, error)
    doc["lock"] = lock
    doc["read_ms"] = round((time.monotonic() - started) * 1000, 1)
    print(json.dumps(doc, indent=2) if as_json else render(doc))
    return 0 if error is None else 1
