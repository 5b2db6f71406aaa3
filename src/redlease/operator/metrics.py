"""Prometheus text exposition of the operator's own numbers and of every lock it refreshes.

Served on ``--metrics HOST:PORT`` (off by default, 127.0.0.1 unless told otherwise) by
:func:`redlease.operator.ports.serve_metrics`. Names are ``redlease_operator_*`` and
``redlease_lock_*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_PHASES = ("Free", "Held", "Degraded", "Unavailable", "Invalid")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(
    *,
    cycles: int,
    locks: int,
    round_trips: int,
    statuses: Iterable[tuple[str, str, Mapping[str, Any]]],
    failures: int = 0,
    last_refresh: float | None = None,
    interval: float | None = None,
    leader: bool | None = None,
    tasks: int | None = None,
) -> str:
    """The exposition text. ``statuses`` yields (namespace, name, last written status);
    ``leader``: whether this replica is the active one (None: no leader election);
    ``tasks``: asyncio tasks of the reconciling loop (a leak shows here first)."""
    lines = [
        "# HELP redlease_operator_refresh_cycles_total Refresh cycles completed.",
        "# TYPE redlease_operator_refresh_cycles_total counter",
        f"redlease_operator_refresh_cycles_total {cycles}",
        "# HELP redlease_operator_locks DistributedLocks read in the last cycle.",
        "# TYPE redlease_operator_locks gauge",
        f"redlease_operator_locks {locks}",
        "# HELP redlease_operator_redis_round_trips_total Redis round trips for status reads.",
        "# TYPE redlease_operator_redis_round_trips_total counter",
        f"redlease_operator_redis_round_trips_total {round_trips}",
        "# HELP redlease_operator_refresh_failures_total Refresh ticks that failed (retried).",
        "# TYPE redlease_operator_refresh_failures_total counter",
        f"redlease_operator_refresh_failures_total {failures}",
    ]
    if interval is not None:
        lines += [
            "# HELP redlease_operator_refresh_interval_seconds Seconds between two refreshes.",
            "# TYPE redlease_operator_refresh_interval_seconds gauge",
            f"redlease_operator_refresh_interval_seconds {interval:g}",
        ]
    if last_refresh is not None:
        lines += [
            "# HELP redlease_operator_last_refresh_timestamp_seconds End of the last refresh.",
            "# TYPE redlease_operator_last_refresh_timestamp_seconds gauge",
            f"redlease_operator_last_refresh_timestamp_seconds {last_refresh:.3f}",
        ]
    if tasks is not None:
        lines += [
            "# HELP redlease_operator_asyncio_tasks Tasks of the reconciling event loop.",
            "# TYPE redlease_operator_asyncio_tasks gauge",
            f"redlease_operator_asyncio_tasks {tasks}",
        ]
    if leader is not None:
        lines += [
            "# HELP redlease_operator_leader 1 on the active replica (it holds the Lease).",
            "# TYPE redlease_operator_leader gauge",
            f"redlease_operator_leader {1 if leader else 0}",
        ]
    phase_lines: list[str] = []
    node_lines: list[str] = []
    token_lines: list[str] = []
    for ns, name, status in statuses:
        base = f'namespace="{_label(ns)}",name="{_label(name)}"'
        for phase in _PHASES:
            value = 1 if status.get("phase") == phase else 0
            phase_lines.append(f'redlease_lock_phase{{{base},phase="{phase}"}} {value}')
        if "healthyNodes" in status:
            node_lines.append(f"redlease_lock_healthy_nodes{{{base}}} {status['healthyNodes']}")
        if isinstance(status.get("lastFencingToken"), int):
            token_lines.append(
                f"redlease_lock_fencing_token{{{base}}} {status['lastFencingToken']}"
            )
    lines += [
        "# HELP redlease_lock_phase 1 for the lock's current phase.",
        "# TYPE redlease_lock_phase gauge",
    ]
    lines += phase_lines
    lines += [
        "# HELP redlease_lock_healthy_nodes Redis nodes that answered.",
        "# TYPE redlease_lock_healthy_nodes gauge",
    ]
    lines += node_lines
    lines += [
        "# HELP redlease_lock_fencing_token Highest fencing token issued.",
        "# TYPE redlease_lock_fencing_token gauge",
    ]
    lines += token_lines
    return "\n".join(lines) + "\n"
