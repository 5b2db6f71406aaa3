"""Prometheus metrics of one sidecar (its own registry, served on ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from redlease.sidecar.election import Transition

__all__ = ["CONTENT_TYPE", "Metrics"]


class Metrics:
    """``redlease_is_leader``, ``redlease_transitions_total``, renew latency, errors by kind."""

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
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
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
        self.candidates = Gauge(
            "redlease_candidates", "Live candidates as last read", labels, registry=self.registry
        )
        self.nodes = Gauge(
            "redlease_nodes",
            "Redis nodes of the lock: total, healthy (answered the latest read) and quorum",
            [*labels, "state"],
            registry=self.registry,
        )
        self.holder_known = Gauge(
            "redlease_holder_known",
            "1 when a quorum of nodes agrees on the holder or that the lock is free",
            labels,
            registry=self.registry,
        )
        self.is_leader.labels(lock).set(0)

    def transition(self, transition: Transition) -> None:
        if transition.kind != "observed":
            self.transitions.labels(self.lock, transition.kind).inc()

    def update(self, doc: dict[str, object]) -> None:
        self.is_leader.labels(self.lock).set(1 if doc.get("leader") else 0)
        token = doc.get("fencing_token")
        self.fencing_token.labels(self.lock).set(token if isinstance(token, int) else 0)
        candidates = doc.get("candidates")
        self.candidates.labels(self.lock).set(candidates if isinstance(candidates, int) else 0)
        nodes = doc.get("nodes")
        if isinstance(nodes, dict):
            for state in ("total", "healthy", "quorum"):
                self.nodes.labels(self.lock, state).set(int(nodes.get(state) or 0))
        self.holder_known.labels(self.lock).set(0 if doc.get("holder_unknown") else 1)

    def renewed(self, latency: float) -> None:
        self.renew.labels(self.lock).observe(latency)

    def error(self, kind: str) -> None:
        self.errors.labels(self.lock, kind).inc()

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
