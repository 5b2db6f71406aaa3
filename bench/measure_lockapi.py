"""Measure the lock API's port under a flood of blocking acquires and stalled bodies (issue 34).

Run: .venv/bin/python -m bench.measure_lockapi [SECONDS] [hammer]

One real sidecar (``--api-locks jobs/``) on a local redis-server. 20 holders each hold a lease
(``jobs/h0`` .. ``jobs/h19``). For SECONDS (default 20) a flood thread keeps 1,000 blocking
acquires (``wait_ms`` 60 s, on the held names) and 256 stalled bodies (headers and 12 bytes of a
4,096-byte body) in flight, opening a new one whenever one is answered or closed; a refused
acquire (503) is sent again after its ``Retry-After`` (``hammer``: at once, ignoring it).
Meanwhile ``/healthz`` is probed every 20 ms on a fresh connection (connect included), on the
flooded ``--http`` port and on the probe-only ``--probes`` listener (what an injected pod's
kubelet probes), each port by a process of its own, and every holder (a thread each) extends
its lease once a second; at the end every holder releases. Prints the probes' p50 / p99 / max
(ms) and failures per port, how many extends (their p50 and max) and releases were answered
200, the CPU (in cores) the sidecar, its probe process, the flood and redis-server used
meanwhile, and the load average (the machine may be shared).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import multiprocessing
import os
import selectors
import socket
import sys
import threading
import time
from typing import Any

from bench import stats
from bench.runinfo import proc_usage
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar

WAITS, STALLED, HOLDERS = 1000, 256, 20
PROBE_EVERY = 0.02  # seconds between two probes of one port


def call(port: int, path: str, body: Any = None, method: str = "POST") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        conn.close()


def acquire(port: int, name: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", f"/locks/{name}/acquire", body=json.dumps({"ttl_ms": 60_000}))
    doc = json.loads(conn.getresponse().read())
    conn.close()
    return str(doc["lease"])


def wait_bytes(i: int) -> bytes:
    body = json.dumps({"ttl_ms": 60_000, "wait_ms": 60_000}).encode()
    return (f"POST /locks/jobs/h{i % HOLDERS}/acquire HTTP/1.1\r\nHost: s\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body  # fmt: skip


STALL = (b"POST /locks/jobs/slow/acquire HTTP/1.1\r\nHost: s\r\nContent-Length: 4096\r\n\r\n"
         b'{"ttl_ms": 10')  # fmt: skip


class Flood:
    """Keeps ``WAITS`` blocking acquires and ``STALLED`` stalled bodies open against ``port``."""

    def __init__(self, port: int, stop: Any, hammer: bool = False) -> None:
        self.port = port
        self.hammer = hammer
        self.later: list[tuple[float, str]] = []  # (when, kind): refused, sent after Retry-After
        self.sel = selectors.DefaultSelector()
        self.stop = stop
        self.opened = {"wait": 0, "stall": 0}
        self.answers: dict[bytes, int] = {}

    def open(self, kind: str) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(wait_bytes(self.opened[kind]) if kind == "wait" else STALL)
        except OSError:
            return
        s.setblocking(False)
        self.opened[kind] += 1
        self.sel.register(s, selectors.EVENT_READ, kind)

    def run(self) -> None:
        for i in range(WAITS + STALLED):  # noqa: B007
            self.open("wait" if i < WAITS else "stall")
        while not self.stop.is_set():
            now = time.monotonic()
            while self.later and self.later[0][0] <= now:
                self.open(self.later.pop(0)[1])
            for key, _ in self.sel.select(0.05):
                s: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if data[:9] == b"HTTP/1.1 ":
                    code = data[9:12]
                    self.answers[code] = self.answers.get(code, 0) + 1
                self.sel.unregister(s)
                s.close()
                if data[9:12] == b"503" and not self.hammer:  # Retry-After: 1
                    self.later.append((time.monotonic() + 1.0, key.data))
                else:
                    self.open(key.data)  # keep the flood in flight
        for key in list(self.sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]


def flood(port: int, stop: Any, hammer: bool, out: Any) -> None:
    """The flood in its own process (the probes' timings are not the flood's GIL's)."""
    f = Flood(port, stop, hammer)
    f.run()
    out.put((f.opened, f.answers))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def probe(port: int, seconds: float, out: Any) -> None:
    """``/healthz`` on ``port`` every :data:`PROBE_EVERY` s for ``seconds``, on a fresh
    connection each (connect included), in a process of its own: one port's slow answers do
    not space out the other's probes. Puts (milliseconds of the answered, failures)."""
    took: list[float] = []
    failed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        if call(port, "/healthz", method="GET") == 200:
            took.append((time.monotonic() - t0) * 1000)
        else:
            failed += 1
        time.sleep(max(0.0, t0 + PROBE_EVERY - time.monotonic()))
    out.put((port, took, failed))


def main(seconds: float = 20.0, hammer: bool = False) -> None:
    server = RedisServer().start()
    probe_port = free_port()
    sc = Sidecar("bench", "bench-lockapi", [server.url],
                 extra=["--api-locks", "jobs/", "--probes", f"127.0.0.1:{probe_port}"])  # fmt: skip
    sc.start().wait_up()
    assert sc.proc is not None
    try:
        leases = [acquire(sc.port, f"jobs/h{i}") for i in range(HOLDERS)]
        stop = multiprocessing.Event()
        out: multiprocessing.Queue[Any] = multiprocessing.Queue()
        flooding = multiprocessing.Process(target=flood, args=(sc.port, stop, hammer, out))
        flooding.start()
        time.sleep(2.0)  # the flood fills the port
        pids = {"sidecar": sc.proc.pid, "its probe process": next(iter(sc.children()), None),
                "flood": flooding.pid,
                "redis-server": server.proc.pid if server.proc is not None else None}  # fmt: skip
        cpu = {who: pid for who, pid in pids.items() if pid is not None}
        cpu0 = {who: proc_usage(pid)[1] for who, pid in cpu.items()}
        wall0 = time.monotonic()
        end = wall0 + seconds
        probed: multiprocessing.Queue[Any] = multiprocessing.Queue()
        probers = [multiprocessing.Process(target=probe, args=(port, seconds, probed))
                   for port in (sc.port, probe_port)]  # fmt: skip
        for prober in probers:
            prober.start()
        extends: list[tuple[int, float]] = []  # (status, ms) of every holder's extends

        def holder(i: int, lease: str) -> None:  # extends once a second, as an app would
            while (t0 := time.monotonic()) < end:
                status = call(sc.port, f"/locks/jobs/h{i}/extend", {"lease": lease})
                extends.append((status, (time.monotonic() - t0) * 1000))
                time.sleep(max(0.0, min(end, t0 + 1.0) - time.monotonic()))

        holders = [threading.Thread(target=holder, args=item) for item in enumerate(leases)]
        for thread in holders:
            thread.start()
        for thread in holders:
            thread.join()
        results = {port: (took, failed) for port, took, failed in
                   (probed.get(timeout=60) for _ in probers)}  # fmt: skip
        for prober in probers:
            prober.join(10)
        released = sum(
            call(sc.port, f"/locks/jobs/h{i}/release", {"lease": lease}) == 200
            for i, lease in enumerate(leases)
        )
        wall = time.monotonic() - wall0
        used = {who: (proc_usage(cpu[who])[1] - before) / wall for who, before in cpu0.items()}
        load = os.getloadavg()
        stop.set()
        opened, answers = out.get(timeout=30)
        flooding.join(10)
        print(f"flood: {opened['wait']} blocking acquires and {opened['stall']} stalled bodies "
              f"opened; answers {dict(sorted(answers.items()))}")  # fmt: skip
        for port in (sc.port, probe_port):
            took, failed = results[port]
            where = "--http" if port == sc.port else "--probes"
            print(f"/healthz on {where}: {len(took)} answered, {failed} failed; p50 "
                  f"{stats.percentile(took, 50):.1f} ms, p99 {stats.percentile(took, 99):.1f} ms,"
                  f" max {max(took, default=math.nan):.1f} ms")  # fmt: skip
        ok = [ms for status, ms in extends if status == 200]
        print(f"holders: {len(ok)}/{len(extends)} extends (p50 {stats.percentile(ok, 50):.0f} "
              f"ms, max {max(ok, default=math.nan):.0f} ms) and {released}/{HOLDERS} releases "
              "answered 200")  # fmt: skip
        print("CPU (cores) " + ", ".join(f"{who} {share:.2f}" for who, share in used.items())
              + f"; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on "
              f"{os.cpu_count()} CPUs")  # fmt: skip
    finally:
        sc.stop()
        server.stop()


if __name__ == "__main__":
    for arg in sys.argv[2:]:  # waits=N stalled=N: other flood sizes
        if arg.startswith(("waits=", "stalled=")):
            globals()[arg.split("=")[0].upper()] = int(arg.split("=")[1])
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0, "hammer" in sys.argv[2:])
