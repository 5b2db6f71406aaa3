"""The probe-only listener (``--probes``) answers from a process of its own (sidecar/probes.py):
the kubelet's probes never wait for the sidecar's main event loop, and still fail when that loop
is wedged. A real sidecar and redis-server; the main loop is "wedged" by stopping the sidecar's
process (SIGSTOP), which leaves its probe process running, as a busy or stuck loop would."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.sidecarprocs import Sidecar, wait_until
from redlease.sidecar.probes import NEVER, Board, Verdict, Verdicts


def ask(port: int, path: str, timeout: float = 5.0) -> tuple[int, Any] | str:
    """GET ``path``: (status, JSON body), or the name of the error (no answer in time...)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


@contextlib.contextmanager
def stopped(sc: Sidecar) -> Iterator[None]:
    """The sidecar's main process stopped (its event loop makes no progress) meanwhile."""
    sc.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        sc.signal(signal.SIGCONT)


def with_probes(
    sidecars: Callable[..., Sidecar], redis: RedisServer, lock: str, *extra: str
) -> tuple[Sidecar, int]:
    """A sidecar with ``--probes`` (and ``extra`` flags), ready on its probe port."""
    port = free_port()
    sc = sidecars("pp", lock, [redis.url], extra=["--probes", f"127.0.0.1:{port}", *extra])
    sc.wait_up()
    assert wait_until(lambda: ask(port, "/readyz") == (200, {"ready": True}), timeout=30)
    return sc, port


def test_the_probes_are_answered_while_the_main_loop_is_stopped(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """For 2 s of a stopped main loop, every probe is answered, and healthy: the verdict holds
    while the election loop's step is not overdue (a retry period of 2.5 s: 5 s of slack).
    Before: the probes were served by the main loop, and none was answered while it stood."""
    timing = ["--ttl", "10", "--renew-deadline", "6", "--retry-period", "2.5"]
    sc, port = with_probes(sidecars, redis_server, lock_name, *timing)
    answers: list[Any] = []
    with stopped(sc):
        since = time.monotonic()
        while time.monotonic() - since < 2.0:
            done = threading.Event()

            def probe(done: threading.Event = done) -> None:
                answers.append((ask(port, "/healthz", timeout=30), ask(port, "/readyz")))
                done.set()

            threading.Thread(target=probe, daemon=True).start()
            answered_while_stopped = done.wait(10)
            assert answered_while_stopped
    assert answers and all(a == ((200, {"ok": True}), (200, {"ready": True})) for a in answers)
    assert sc.get("/healthz")[0] == 200  # and the main loop carries on


def test_a_wedged_main_loop_fails_liveness_and_readiness_then_passes_again(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """Stopped, the main loop sends no verdict: within its bound (the election loop's step
    overdue, 2 s of slack here; at most 5 s) the probes answer 500 and 503, at once, not by a
    timeout. Before: no answer at all while it stood."""
    sc, port = with_probes(sidecars, redis_server, lock_name)
    with stopped(sc):
        assert wait_until(lambda: ask(port, "/healthz") == (500, {"ok": False}), timeout=30)
        assert ask(port, "/readyz") == (503, {"ready": False})
    assert wait_until(lambda: ask(port, "/healthz") == (200, {"ok": True}), timeout=30)
    assert wait_until(lambda: ask(port, "/readyz") == (200, {"ready": True}), timeout=30)


def test_readiness_on_leadership_ends_at_the_terms_deadline_whatever_the_loop_does(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """``--ready leader``: a stopped leader stops renewing, and its last verdict says ready only
    until its term's local deadline (the renew deadline, 2 s) though the same verdict still
    says healthy (its bound is ~4 s away): no probe answer claims leadership after the
    renew deadline."""
    timing = ["--ttl", "10", "--renew-deadline", "2", "--retry-period", "1.9"]
    sc, port = with_probes(sidecars, redis_server, lock_name, "--ready", "leader", *timing)
    with stopped(sc):
        assert wait_until(lambda: ask(port, "/readyz") == (503, {"ready": False}), timeout=30)
        assert ask(port, "/healthz") == (200, {"ok": True})
    assert wait_until(lambda: ask(port, "/readyz") == (200, {"ready": True}), timeout=30)


def test_a_probe_address_that_cannot_be_bound_stops_the_start(
    redis_server: RedisServer, lock_name: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sc = Sidecar("pq", lock_name, [redis_server.url],
                     extra=["--probes", f"127.0.0.1:{port}"])  # fmt: skip
        try:
            assert sc.start().wait(30) == 2
            assert sc.children() == []
        finally:
            sc.stop()
    log = sc.log()
    assert f"--probes: cannot listen on 127.0.0.1:{port}" in log and "Traceback" not in log


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_verdict_holds_until_its_bounds() -> None:
    clock = Clock()
    board = Board(clock)
    assert not board.healthy() and not board.is_ready()  # nothing received yet
    # healthy until the loop's step is overdue (102), ready until the term ends (101); sent
    # with a stall bound of 5 s from 100
    board.verdict = Verdict(healthy_until=102.0, ready_until=101.0).within(105.0)
    clock.now = 100.9
    assert board.healthy() and board.is_ready()
    clock.now = 101.0  # leader strictly before the deadline: not ready at it
    assert board.healthy() and not board.is_ready()
    clock.now = 102.0
    assert not board.healthy()
    # "until further notice" still ends at the stall bound when no verdict follows
    board.verdict = Verdict(math.inf, math.inf).within(107.0)
    clock.now = 106.9
    assert board.healthy() and board.is_ready()
    clock.now = 107.0
    assert not board.healthy() and not board.is_ready()
    assert Verdict(NEVER, math.inf).within(200.0) == Verdict(NEVER, 200.0)


def test_verdicts_are_read_whole_from_the_pipe() -> None:
    split = Verdicts()
    one, two = Verdict(1.0, 2.0), Verdict(3.0, math.inf)
    raw = b"".join(bytes(Verdicts.pack(v)) for v in (one, two))
    assert split.feed(raw[:5]) is None  # a partial record waits for its rest
    assert split.feed(raw[5:20]) == one
    assert split.feed(raw[20:]) == two
    assert split.feed(raw + raw[:3]) == two  # the latest whole one; the rest waits
    assert split.feed(raw[3:16]) == one
