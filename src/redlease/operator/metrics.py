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
    numbers = _operator_numbers(
        cycles=cycles,
        locks=locks,
        round_trips=round_trips,
        failures=failures,
        interval=interval,
        last_refresh=last_refresh,
        tasks=tasks,
        leader=leader,
    )
    lines: list[str] = []
    for suffix, kind, text, value in numbers:
        if value is not None:
            name = f"redlease_operator_{suffix}"
            lines += _family(name, kind, text, [f"{name} {value}"])
    lines += _lock_families(statuses)
    return "\n".join(lines) + "\n"


def _family(name: str, kind: str, text: str, samples: Iterable[str]) -> list[str]:
    """One metric family: its HELP and TYPE lines, then its samples."""
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *samples]


def _operator_numbers(
    *,
    cycles: int,
    locks: int,
    round_trips: int,
    failures: int,
    interval: float | None,
    last_refresh: float | None,
    tasks: int | None,
    leader: bool | None,
) -> list[tuple[str, str, str, str | None]]:
    """The operator's own numbers in exposition order: (name after ``redlease_operator_``,
    type, help, the sample's value; None leaves the family out)."""
    return [
        ("refresh_cycles_total", "counter", "Refresh cycles completed.", f"{cycles}"),
        ("locks", "gauge", "DistributedLocks read in the last cycle.", f"{locks}"),
        (
            "redis_round_trips_total",
            "counter",
            "Redis round trips for status reads.",
            f"{round_trips}",
        ),
        (
            "refresh_failures_total",
            "counter",
            "Refresh ticks that failed (retried).",
            f"{failures}",
        ),
        (
            "refresh_interval_seconds",
            "gauge",
            "Seconds between two refreshes.",
            None if interval is None else f"{interval:g}",
        ),
        (
            "last_refresh_timestamp_seconds",
            "gauge",
            "End of the last refresh.",
            None if last_refresh is None else f"{last_refresh:.3f}",
        ),
        (
            "asyncio_tasks",
            "gauge",
            "Tasks of the reconciling event loop.",
            None if tasks is None else f"{tasks}",
        ),
        (
            "leader",
            "gauge",
            "1 on the active replica (it holds the Lease).",
            None if leader is None else f"{1 if leader else 0}",
        ),
    ]


def _lock_families(statuses: Iterable[tuple[str, str, Mapping[str, Any]]]) -> list[str]:
    """Every lock's phase (one sample per phase), healthy nodes and fencing token, as three
    families; a lock whose status lacks a number has no sample of it."""
    phases: list[str] = []
    nodes: list[str] = []
    tokens: list[str] = []
    for ns, name, status in statuses:
        base = f'namespace="{_label(ns)}",name="{_label(name)}"'
        for phase in _PHASES:
            value = 1 if status.get("phase") == phase else 0
            phases.append(f'redlease_lock_phase{{{base},phase="{phase}"}} {value}')
        if "healthyNodes" in status:
            nodes.append(f"redlease_lock_healthy_nodes{{{base}}} {status['healthyNodes']}")
        if isinstance(status.get("lastFencingToken"), int):
            tokens.append(f"redlease_lock_fencing_token{{{base}}} {status['lastFencingToken']}")
    return [
        *_family("redlease_lock_phase", "gauge", "1 for the lock's current phase.", phases),
        *_family("redlease_lock_healthy_nodes", "gauge", "Redis nodes that answered.", nodes),
        *_family("redlease_lock_fencing_token", "gauge", "Highest fencing token issued.", tokens),
    ]
