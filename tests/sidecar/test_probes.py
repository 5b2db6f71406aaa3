"""The probe-only listener (``--probes``) that injected pods' httpGet probes ask: a real
sidecar and real Redis, the probes exactly as the injection writes them, run as the kubelet runs
them (redlease.devtools.pods.kubelet_probe)."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable
from typing import Any

from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.pods import kubelet_probe
from redlease.devtools.sidecarprocs import Sidecar, wait_until
from redlease.operator.injection import InjectConfig, Options, sidecar_container


def injected_probes(port: int) -> dict[str, dict[str, Any]]:
    container = sidecar_container(Options(lock="orders", probe_port=port), InjectConfig(), None)
    assert f"--probes=0.0.0.0:{port}" in container["args"]
    return {kind: container[kind] for kind in ("startupProbe", "readinessProbe", "livenessProbe")}


def answer(port: int, path: str, method: str = "GET") -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if body.startswith(b"{") else body
    finally:
        conn.close()


def test_probes_answer_health_and_readiness_only(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    port = free_port()
    probes = injected_probes(port)
    sc = sidecars("p0", lock_name, [redis_server.url], extra=["--probes", f"127.0.0.1:{port}"])
    sc.wait_up()
    for kind, probe in probes.items():
        assert wait_until(lambda p=probe: kubelet_probe(p)[0]), kind
    assert answer(port, "/healthz") == (200, {"ok": True})
    assert answer(port, "/readyz") == (200, {"ready": True})
    # nothing about the lock on the pod IP: the state stays on the loopback --http
    for path in ("/status", "/", "/metrics", "/status?wait=5", "/locks/x"):
        assert answer(port, path)[0] == 404, path
    assert answer(port, "/drained", "POST")[0] in (404, 405)
    assert sc.get("/status")[0] == 200  # --http unchanged

    # Redis hung: not ready (connected mode), still alive (no restart for an outage)
    redis_server.pause()
    try:
        wait_until(lambda: not kubelet_probe(probes["readinessProbe"])[0], timeout=30)
        assert kubelet_probe(probes["readinessProbe"]) == (False, "HTTP 503")
        assert kubelet_probe(probes["livenessProbe"]) == (True, "HTTP 200")
    finally:
        redis_server.resume()
    wait_until(lambda: kubelet_probe(probes["readinessProbe"])[0], timeout=30)

    # sidecar gone: every probe fails at once (refused), not after its timeout
    sc.stop()
    for probe in probes.values():
        assert kubelet_probe(probe) == (False, "ConnectionRefusedError")


def test_a_flood_of_the_probe_port_takes_nothing_from_the_loopback_port(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """Whoever reaches the pod IP may open connections to the probe port: they are capped
    there (and timed out), the loopback port keeps answering, and the probes come back."""
    port = free_port()
    probe = injected_probes(port)["livenessProbe"]
    sc = sidecars("p1", lock_name, [redis_server.url], extra=["--probes", f"127.0.0.1:{port}"])
    sc.wait_up()
    flood = []
    try:
        for _ in range(64):
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        assert sc.get("/healthz")[0] == 200  # the loopback port is not touched
    finally:
        for s in flood:
            s.close()
    assert wait_until(lambda: kubelet_probe(probe)[0], timeout=30)


def test_probes_flag_is_checked(redis_server: RedisServer, lock_name: str) -> None:
    sc = Sidecar("p2", lock_name, [redis_server.url], extra=["--probes", "127.0.0.1:http"])
    try:
        assert sc.start().wait(30) == 2
        assert "--probes" in sc.log() and "Traceback" not in sc.log()
    finally:
        sc.stop()
