"""Prometheus metrics of one sidecar (its own registry, served on ``/metrics``)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from redlease.core.restart import Outside
from redlease.core.timing import Timing
from redlease.sidecar.election import Transition
from redlease.sidecar.statefile import failure_kind

__all__ = ["CONTENT_TYPE", "Metrics"]
# seconds; up to 10: a renewal close to a default renew deadline (10 s) must be visible
RENEW_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    """``redlease_is_leader``, ``redlease_transitions_total``, renew latency, errors by kind,
    state-file write failures; the lock as last read (token, holders and their limit, nodes),
    all from the status document."""

    def __init__(self, lock: str) -> None:
        self.lock = lock
        # the *_created series only add noise for one process
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["lock"]
        self.is_leader = Gauge(
            "redlease_is_leader", "1 while this sidecar leads", labels, registry=self.registry
        )
        self.transitions = Counter(
            "redlease_transitions",
            "Leadership changes of this sidecar (elected, lost, stepped down)",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.renew = Histogram(
            "redlease_renew_seconds",
            "Latency of successful lease renewals",
            labels,
            buckets=RENEW_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "redlease_errors", "Failed Redis operations by kind", [*labels, "kind"],
            registry=self.registry,
        )  # fmt: skip
        self.fencing_token = Gauge(
            "redlease_fencing_token",
            "Fencing token of the current holder as last seen (0: none)",
            labels,
            registry=self.registry,
        )
        self.holders = Gauge(
            "redlease_holders",
            "Holders of the lock as last read (a counting semaphore's, up to its limit; a "
            "mutex: 0 or 1), this sidecar counted while it leads",
            labels,
            registry=self.registry,
        )
        self.holders_limit = Gauge(
            "redlease_holders_limit",
            "How many may hold the lock at once (--holders, spec.holders; 1: a mutex)",
            labels,
            registry=self.registry,
        )
        self.candidates = Gauge(
            "redlease_candidates", "Live candidates as last read", labels, registry=self.registry
        )
        self.nodes = Gauge(
            "redlease_nodes",
            "Redis nodes of the lock: total, healthy (answered the latest read and count), "
            "not_counting (answered but lost their data) and quorum",
            [*labels, "state"],
            registry=self.registry,
        )
        self.rejoins_in = Gauge(
            "redlease_node_rejoins_in_seconds",
            "A node that answered but does not count (nodes_not_counting): seconds until it "
            "rejoins by itself (0: at the next lock operation); -1: it waits for intact nodes "
            "or needs an operator (the strict restart mode)",
            [*labels, "node"],
            registry=self.registry,
        )
        self.holder_known = Gauge(
            "redlease_holder_known",
            "1 when a quorum of nodes agrees on the holder or that the lock is free",
            labels,
            registry=self.registry,
        )
        self.timing_ = Gauge(
            "redlease_timing_seconds",
            "The lock's timing: ttl, renew_deadline, retry_period (for alert thresholds)",
            [*labels, "setting"],
            registry=self.registry,
        )
        self.leader_seen = Gauge(
            "redlease_leader_last_seen_timestamp_seconds",
            "When this sidecar last knew of a leader (itself or a holder in Redis); its start "
            "time until then",
            labels,
            registry=self.registry,
        )
        self.state_file_failures = Counter(
            "redlease_state_file_write_failures",
            "Failed writes of the state file or the leader marker, by errno name",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.state_file_writable = Gauge(
            "redlease_state_file_writable",
            "0 while the latest write of the state file or the leader marker failed, else 1",
            labels,
            registry=self.registry,
        )
        self.waiting_ = Gauge(
            "redlease_status_waiting",
            "Long-polls of /status (?wait=) waiting for a change right now",
            labels,
            registry=self.registry,
        )
        self.is_leader.labels(lock).set(0)
        self.leader_seen.labels(lock).set(time.time())
        self.state_file_writable.labels(lock).set(1)

    def transition(self, transition: Transition) -> None:
        if transition.kind != "observed":
            self.transitions.labels(self.lock, transition.kind).inc()

    def timing(self, timing: Timing) -> None:
        for setting in ("ttl", "renew_deadline", "retry_period"):
            self.timing_.labels(self.lock, setting).set(getattr(timing, setting))

    def update(self, doc: dict[str, object]) -> None:
        self.is_leader.labels(self.lock).set(1 if doc.get("leader") else 0)
        if doc.get("leader") or doc.get("holder"):
            self.leader_seen.labels(self.lock).set(time.time())
        token = doc.get("fencing_token")
        self.fencing_token.labels(self.lock).set(token if isinstance(token, int) else 0)
        holders = doc.get("holders")
        self.holders.labels(self.lock).set(len(holders) if isinstance(holders, list) else 0)
        limit = doc.get("holders_limit")
        self.holders_limit.labels(self.lock).set(limit if isinstance(limit, int) else 1)
        candidates = doc.get("candidates")
        self.candidates.labels(self.lock).set(candidates if isinstance(candidates, int) else 0)
        nodes = doc.get("nodes")
        if isinstance(nodes, dict):
            for state in ("total", "healthy", "quorum"):
                self.nodes.labels(self.lock, state).set(int(nodes.get(state) or 0))
        outside = doc.get("nodes_not_counting")
        self.nodes.labels(self.lock, "not_counting").set(len(outside or ()))  # type: ignore[arg-type]
        self.holder_known.labels(self.lock).set(0 if doc.get("holder_unknown") else 1)

    def not_counting(self, outside: Mapping[str, Outside]) -> None:
        """One ``redlease_node_rejoins_in_seconds`` series per node that does not count now
        (the lock view's reasons: one place); nodes that count again lose theirs."""
        self.rejoins_in.clear()
        for node, out in outside.items():
            left = -1.0 if out.rejoin_in is None else out.rejoin_in
            self.rejoins_in.labels(self.lock, node).set(round(left, 1))

    def waiting(self, count: int) -> None:
        self.waiting_.labels(self.lock).set(count)

    def renewed(self, latency: float) -> None:
        self.renew.labels(self.lock).observe(latency)

    def error(self, kind: str) -> None:
        self.errors.labels(self.lock, kind).inc()

    def state_file_failed(self, exc: OSError) -> None:
        self.state_file_failures.labels(self.lock, failure_kind(exc)).inc()
        self.state_file_writable.labels(self.lock).set(0)

    def state_file_written(self) -> None:
        self.state_file_writable.labels(self.lock).set(1)

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
