"""`GET /status?wait=&since=` on real sidecar processes and a real redis-server: a waiting request
is answered by the change (a hand-off, a step-down), a stale ``since`` at once, bad parameters
with 400, the port guard neither cuts a long wait nor lets waiters take every connection;
`redlease wait --http` and `redlease status --http --watch` ride on it."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.netfault import half_open
from redlease.devtools.sidecarprocs import ROOT, Sidecar, env, wait_until
from redlease.serving import portlimits
from redlease.sidecar import web

TTL, DEADLINE, RETRY = 3.0, 2.0, 0.1
WAITING = "redlease_status_waiting"


def pair(start: Callable[..., Sidecar], server: RedisServer, lock: str) -> tuple[Sidecar, Sidecar]:
    """Two sidecars; the first leads, the second waits."""
    first = start("pod-a", lock, [server.url], ttl=TTL, renew_deadline=DEADLINE,
                  retry_period=RETRY).wait_up()  # fmt: skip
    wait_until(first.is_leader)
    second = start("pod-b", lock, [server.url], ttl=TTL, renew_deadline=DEADLINE,
                   retry_period=RETRY).wait_up()  # fmt: skip
    wait_until(lambda: (second.status() or {}).get("holder") == "pod-a")
    for sc in (first, second):
        wait_until(lambda sc=sc: (sc.status() or {}).get("candidates") == 2)  # type: ignore[misc]
    return first, second


def alone(start: Callable[..., Sidecar], server: RedisServer, lock: str, **kw: Any) -> Sidecar:
    """One sidecar, leading, its own candidate seen."""
    sc = start("pod-a", lock, [server.url], ttl=TTL, renew_deadline=DEADLINE, retry_period=RETRY,
               **kw).wait_up()  # fmt: skip
    wait_until(sc.is_leader)
    wait_until(lambda: (sc.status() or {}).get("candidates") == 1)
    return sc


def get(port: int, path: str, timeout: float = 70.0) -> tuple[int, Any, float]:
    """(status code, JSON body, wall time the answer arrived) on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = json.loads(resp.read())
        return resp.status, body, time.time()
    finally:
        conn.close()


class Waiter:
    """Long-polls ``/status`` of a sidecar in a thread until ``done(doc)``; keeps every answer
    with the ``since`` it was asked with and how long it took."""

    def __init__(self, sc: Sidecar, since: str, done: Callable[[dict[str, Any]], bool]) -> None:
        self.answers: list[tuple[str, dict[str, Any], float, float]] = []  # since, doc, took, at
        self.error: BaseException | None = None
        self._args = (sc.port, since, done)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        port, since, done = self._args
        try:
            while True:
                started = time.monotonic()
                code, doc, at = get(port, f"/status?wait=30&since={since}")
                assert code == 200, (code, doc)
                self.answers.append((since, doc, time.monotonic() - started, at))
                if done(doc):
                    return
                since = doc["version"]
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def join(self, timeout: float = 20.0) -> list[tuple[str, dict[str, Any], float, float]]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the long-poll did not return"
        if self.error is not None:
            raise self.error
        return self.answers


def logged_at(sc: Sidecar, event: str) -> float:
    """Wall time of the first log line of ``event`` (structlog's ISO timestamp)."""
    for line in sc.log().splitlines():
        if f'"{event}"' in line:
            return datetime.fromisoformat(json.loads(line)["timestamp"]).timestamp()
    raise AssertionError(f"{event!r} not logged")


@pytest.mark.slow
def test_a_waiting_request_is_answered_by_the_hand_off(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    old, new = pair(sidecars, redis_server, lock_name)
    before = new.status()
    assert before is not None and before["holder"] == "pod-a" and not before["leader"]
    on_new = Waiter(new, before["version"], lambda d: d["leader"])
    mine = old.status()
    assert mine is not None and mine["leader"]
    on_old = Waiter(old, mine["version"], lambda d: not d["leader"])
    both_parked = lambda: new.metric(WAITING) == 1 and old.metric(WAITING) == 1  # noqa: E731
    wait_until(both_parked)
    assert on_new.answers == [] and on_old.answers == []
    old.signal(signal.SIGTERM)
    answers = on_new.join()
    # answered because of the change: a new version each time, long before the 30 s wait
    for since, doc, took, _ in answers:
        assert doc["version"] != since and took < 10.0
    last = answers[-1][1]
    assert last["leader"] and last["holder"] == "pod-b"
    assert last["fencing_token"] > before["fencing_token"]
    # the leader's own app learns that it stopped leading, without polling
    lost = on_old.join()[-1][1]
    assert lost["leader"] is False and lost["version"] != mine["version"]
    assert old.wait() == 0
    latency = answers[-1][3] - logged_at(new, "became leader")
    print(f"long-poll answered {latency * 1000:.1f} ms after the new leader's log line")


def test_stale_since_at_once_bad_parameters_400_root_unchanged(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    sc = alone(sidecars, redis_server, lock_name)
    started = time.monotonic()
    code, doc, _ = get(sc.port, "/status?wait=30&since=stale.0")
    assert code == 200 and doc["leader"] and doc["version"] != "stale.0"
    assert time.monotonic() - started < 5.0
    state = json.loads(sc.state_file.read_text())
    assert state["version"] == doc["version"]  # the state file carries the same version
    bad = (("wait=soon", "wait"), ("wait=-1", "wait"), ("wait=1&since=a%20b", "since"))
    for query, name in bad:
        code, body, _ = get(sc.port, f"/status?{query}")
        assert code == 400 and body["parameter"] == name and body["error"].startswith(name)
    assert get(sc.port, "/")[:2] == (200, {"name": "pod-a"})
    code, doc, _ = get(sc.port, "/status?wait=0&since=" + doc["version"])
    assert code == 200 and doc["holder"] == "pod-a"


@pytest.mark.slow
def test_the_port_guard_does_not_cut_a_ten_second_wait(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    sc = alone(sidecars, redis_server, lock_name)
    version = sc.status()["version"]  # type: ignore[index]
    started = time.monotonic()
    code, doc, _ = get(sc.port, f"/status?wait=10&since={version}")  # twice the idle timeout
    took = time.monotonic() - started
    assert code == 200 and doc["version"] == version and doc["leader"]
    assert 10.0 <= took < 15.0


def test_waiters_take_at_most_half_the_connection_cap(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    # 256 descriptors: a cap of 84 connections per port, 42 may wait (the sidecar's two ports
    # share what the reserve leaves, each with its accepts in flight)
    cap = portlimits.cap_within(256, portlimits.MAX_CONNECTIONS, web.PORTS)
    waits = portlimits.park_cap(cap)
    sc = alone(sidecars, redis_server, lock_name, max_open_files=256)
    version = sc.status()["version"]  # type: ignore[index]
    request = f"GET /status?wait=30&since={version} HTTP/1.1\r\nHost: sidecar\r\n\r\n".encode()
    socks = half_open(sc.port, waits + 20, request, timeout=10)
    try:
        answers: dict[int, bytes] = {}
        wait_until(lambda: len(_answers(socks, answers)) >= 20)
        assert sc.metric(WAITING) == waits
        assert len(_answers(socks, answers)) == 20  # the others wait
        assert all(a.startswith(b"HTTP/1.1 503") for a in answers.values())
        for _ in range(5):  # probes and plain reads still get through
            assert get(sc.port, "/healthz", timeout=5)[0] == 200
            assert get(sc.port, "/status", timeout=5)[0] == 200
    finally:
        for s in socks:
            s.close()
    # clients that went away stop waiting: the next long-poll is parked again
    wait_until(lambda: _parks(sc, version))
    wait_until(lambda: sc.metric(WAITING) == 0)
    log = sc.log()
    assert "Traceback" not in log and "Error handling request" not in log


def _answers(socks: list[socket.socket], seen: dict[int, bytes]) -> dict[int, bytes]:
    """``seen`` plus the first bytes of every answer that has arrived since (no blocking)."""
    for i, s in enumerate(socks):
        if i in seen:
            continue
        s.setblocking(False)
        try:
            data = s.recv(64)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        seen[i] = data
    return seen


def _parks(sc: Sidecar, version: str) -> bool:
    with socket.create_connection(("127.0.0.1", sc.port), timeout=5) as s:
        s.sendall(f"GET /status?wait=0.5&since={version} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.settimeout(5)
        return s.recv(64).startswith(b"HTTP/1.1 200")


def redlease(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "redlease", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env(), cwd=ROOT,
    )  # fmt: skip


@pytest.mark.slow
def test_wait_and_status_watch_follow_the_hand_off(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    old, new = pair(sidecars, redis_server, lock_name)
    address = f"127.0.0.1:{new.port}"
    waiting = redlease("wait", "--http", address, "--timeout", "60", "--interval", "30")
    watch = redlease("status", "--http", address, "--watch", "--json")
    try:
        assert waiting.stderr is not None and watch.stdout is not None
        assert "waiting until" in waiting.stderr.readline()
        first = json.loads(watch.stdout.readline())
        assert first["holder"] == "pod-a" and not first["leader"]
        old.signal(signal.SIGTERM)
        # --interval 30: only the long-poll can make it return this soon
        out, _ = waiting.communicate(timeout=10)
        assert waiting.returncode == 0 and out.startswith("leader: pod-b holds")
        seen = [first]
        while not seen[-1]["leader"]:
            seen.append(json.loads(watch.stdout.readline()))
        assert seen[-1]["holder"] == "pod-b"
        versions = [d["version"] for d in seen]
        assert len(set(versions)) == len(versions)  # one line per change
    finally:
        for proc in (waiting, watch):
            proc.kill()
            proc.wait(10)


def test_status_http_reads_the_sidecar_and_watch_needs_it(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    sc = alone(sidecars, redis_server, lock_name)
    address = f"127.0.0.1:{sc.port}"
    out, err = redlease("status", "--http", address, "--json").communicate(timeout=30)
    doc = json.loads(out)
    assert doc["leader"] and doc["holder"] == "pod-a" and doc["version"], err
    text, _ = redlease("status", "--http", address).communicate(timeout=30)
    assert "pod-a (leader)" in text and f"{doc['version']}" in text
    lone = redlease("status", "--lock", lock_name, "--redis", redis_server.url, "--watch")
    _, err = lone.communicate(timeout=30)
    assert lone.returncode == 2 and "--watch" in err and "--http" in err
    assert len(err.strip().splitlines()) == 1


def test_wait_takes_every_cli_duration_and_a_pasted_url_is_accepted(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """One duration grammar on every surface: ``?wait=300ms`` and ``?wait=3s`` as `--ttl 3s`
    takes them; the address `redlease wait` and `status` take may be the URL pasted whole."""
    sc = alone(sidecars, redis_server, lock_name)
    version = sc.status()["version"]  # type: ignore[index]
    started = time.monotonic()
    code, doc, _ = get(sc.port, f"/status?wait=300ms&since={version}")
    assert code == 200 and doc["holder"] == "pod-a"
    assert time.monotonic() - started >= 0.25  # it waited (unchanged), as for wait=0.3
    code, doc, _ = get(sc.port, "/status?wait=3s&since=stale.0")
    assert code == 200 and doc["leader"]
    for query in ("wait=3x", "wait=-1s"):
        code, body, _ = get(sc.port, f"/status?{query}")
        assert code == 400 and body["parameter"] == "wait" and "3s" in body["error"]
    pasted = f"http://127.0.0.1:{sc.port}/status"
    for argv in (["wait", "--http", pasted, "--timeout", "20s"],
                 ["status", "--http", pasted + "/", "--json"],
                 ["status", "--http", f"127.0.0.1:{sc.port}/status?wait=1", "--json"]):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "redlease", *argv], env=env(), cwd=ROOT,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 0, (argv, proc.stderr)
        assert "pod-a" in proc.stdout and "/status/status" not in proc.stderr
