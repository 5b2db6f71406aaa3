"""The chart's alerts and dashboard: every PromQL expression parses, and every metric they use
is one that a running sidecar or operator really exposes.

PromQL is parsed with ``promql-parser`` (PyPI; Python bindings of the Rust promql-parser that
GreptimeDB uses, which follows Prometheus's grammar and its type checks, e.g. vector matching).
The metrics come from ``/metrics`` of real processes -- a leading sidecar on a real
redis-server, and an operator replica with leader election against KMock reconciling one lock --
parsed with prometheus-client's parser.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import helm_python as helm
import kmock
import pytest
from prometheus_client.parser import text_string_to_metric_families

from redlease.devtools.kubeemulator import NAMESPACE, Cluster, Emulator, declare, kubeconfig, until
from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.manifests import render
from redlease.devtools.sidecarprocs import Sidecar, wait_until

promql = pytest.importorskip("promql_parser", reason="the PromQL checks need promql-parser")

MONITORING = {
    "serviceMonitor": {"enabled": True},
    "monitoring": {
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
        "sidecarPodMonitor": {"enabled": True},
    },
}


def rules(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def dashboard(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
    ]
    doc: dict[str, Any] = json.loads(cm["data"]["redlease.json"])
    return doc


def panel_exprs(dash: dict[str, Any]) -> Iterator[str]:
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]


def metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql.VectorSelector) and node.name:
            names.add(node.name)

    promql.walk(promql.parse(expr), visit)
    return names


def exposed(text: str) -> set[str]:
    """Every series name a /metrics text can carry (families without samples included)."""
    out: set[str] = set()
    for family in text_string_to_metric_families(text):
        out.update(sample.name for sample in family.samples)
        if family.type == "counter":
            out.add(family.name + "_total")
        elif family.type == "histogram":
            out.update(family.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            out.add(family.name)
    return out


def test_alerts_and_dashboard_render_and_parse(chart: helm.Chart) -> None:
    docs = render(chart, MONITORING)
    alerts = {r["alert"]: r for r in rules(docs)}
    assert set(alerts) == {
        "RedleaseNoLeader",
        "RedleaseLeadershipFlapping",
        "RedleaseQuorumDegraded",
        "RedleaseQuorumLost",
        "RedleaseRenewLatencyHigh",
        "RedleaseOperatorRefreshFailing",
        "RedleaseOperatorNoActiveReplica",
    }
    for name, rule in alerts.items():
        promql.parse(rule["expr"])  # raises on a syntax or type error
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert "{{ $labels" in rule["annotations"]["summary"] or "operator" in name.lower()
    dash = dashboard(docs)
    exprs = list(panel_exprs(dash))
    assert len(exprs) >= 10
    for expr in exprs:
        promql.parse(expr)
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "redlease-metrics"
    assert all(d["kind"] not in ("PrometheusRule", "PodMonitor") for d in render(chart, None))


def used_metrics(chart: helm.Chart) -> set[str]:
    docs = render(chart, MONITORING)
    exprs = [r["expr"] for r in rules(docs)] + list(panel_exprs(dashboard(docs)))
    names = set().union(*(metric_names(e) for e in exprs))
    for var in dashboard(docs)["templating"]["list"]:
        query = var.get("definition") or ""
        names.update(re.findall(r"label_values\((\w+)", query))
    return names


@pytest.mark.slow
async def test_every_metric_used_is_exposed(
    chart: helm.Chart, redis_server: RedisServer, tmp_path: Path
) -> None:
    wanted = used_metrics(chart)
    sidecar_port = free_port()
    sc = Sidecar(
        "metrics-a", "metrics-lock", [redis_server.url],
        extra=["--metrics", f"127.0.0.1:{sidecar_port}"],
    ).start()  # fmt: skip
    try:
        await asyncio.to_thread(wait_until, sc.is_leader, 20)
        # a renewal observed, and an error of some kind counted
        await asyncio.to_thread(
            wait_until, lambda: "redlease_renew_seconds_count" in (sc.get("/metrics")[1] or ""), 20
        )
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{sidecar_port}/metrics") as resp:
                assert resp.status == 200
                sidecar_text = await resp.text()
            async with http.get(f"http://127.0.0.1:{sidecar_port}/status") as resp:
                assert resp.status == 404  # --metrics serves /metrics alone
        operator_text = await operator_metrics(redis_server, tmp_path)
    finally:
        sc.stop()
    available = exposed(sidecar_text) | exposed(operator_text)
    missing = wanted - available
    assert not missing, f"used by the alerts or the dashboard but exposed by nobody: {missing}"


async def operator_metrics(server: RedisServer, tmp_path: Path) -> str:
    """/metrics of a real operator replica (leader election on) that reconciled one lock."""
    async with Emulator() as api, kmock.Server(api) as srv:
        declare(api)
        url = str(srv.url).rstrip("/")
        config = kubeconfig(tmp_path / "kubeconfig", url)
        port = free_port()
        env = {**os.environ, "KUBECONFIG": str(config), "REDLEASE_REFRESH": "0.3"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "redlease", "operator", "--namespace", NAMESPACE,
            "--leader-election", "--lease-namespace", NAMESPACE, "--identity", "op-0",
            "--metrics", f"127.0.0.1:{port}", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            cluster = Cluster(api, None, url)  # type: ignore[arg-type]
            await cluster.create("metrics", {"keys": ["m"], "nodes": [{"url": server.url}]})
            await until(lambda: cluster.status("metrics").get("phase") == "Free", timeout=30)

            async def scraped() -> str | None:
                try:
                    async with (
                        aiohttp.ClientSession() as http,
                        http.get(f"http://127.0.0.1:{port}/metrics") as resp,
                    ):
                        text = await resp.text()
                except aiohttp.ClientError:
                    return None
                return text if "redlease_operator_last_refresh_timestamp_seconds" in text else None

            text: str = await until(scraped, timeout=30, what="the operator's metrics")
            return text
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
