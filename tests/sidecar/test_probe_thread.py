"""The probe-only listener answers from a thread of its own (sidecar/probes.py): the kubelet's
probes never wait for the sidecar's main event loop, and still fail when that loop is wedged.

In-process: ``serve_probes`` started from this test's event loop (the "main loop"), which the
tests then block on purpose, as a flood or a stuck call would; the probes are sent from another
thread, as the kubelet sends them from outside."""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import socket
import threading
from typing import Any

import pytest

from redlease.devtools.localredis import free_port
from redlease.devtools.sidecarprocs import wait_until
from redlease.sidecar.probes import NEVER, Board, Verdict
from redlease.sidecar.web import serve_probes


class Healthy:
    """A sidecar that is healthy and ready (the parts of the web Source the probes use)."""

    def health(self) -> dict[str, Any]:
        return {"ok": True}

    def ready(self) -> tuple[bool, bool]:
        return True, False

    def verdict(self) -> Verdict:
        return Verdict(math.inf, math.inf)


def ask(port: int, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def in_thread(port: int, path: str) -> tuple[threading.Event, dict[str, Any]]:
    """Probe ``path`` from another thread; the event is set once it has an answer (or error)."""
    done, out = threading.Event(), {}

    def run() -> None:
        try:
            out["answer"] = ask(port, path)
        except OSError as exc:
            out["answer"] = exc
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, out


async def test_the_probes_are_answered_while_the_main_loop_is_blocked() -> None:
    """Before: the probe listener ran on the main loop, and a probe waited for it (150-300 ms
    under the lock API flood of docs/lockapi.md; here, for as long as the loop is blocked)."""
    port = free_port()
    listener = await serve_probes(Healthy(), "127.0.0.1", port)
    try:
        for path, expected in (("/healthz", (200, {"ok": True})),
                               ("/readyz", (200, {"ready": True}))):  # fmt: skip
            done, out = in_thread(port, path)
            # block the main loop (a synchronous wait) until the probe is answered: 10 s at most
            answered_while_blocked = done.wait(10)
            assert answered_while_blocked, path
            assert out["answer"] == expected
    finally:
        await listener.close()
    with pytest.raises(ConnectionRefusedError):  # closed: the port is gone, at once
        ask(port, "/healthz")


async def answered(port: int, path: str, expected: tuple[int, Any]) -> bool:
    """Probe ``path`` from another thread, the main loop running meanwhile, until it answers
    ``expected`` (30 s at most)."""
    deadline = asyncio.get_running_loop().time() + 30
    while asyncio.get_running_loop().time() < deadline:
        if await asyncio.to_thread(ask, port, path) == expected:
            return True
    return False


async def test_a_wedged_main_loop_fails_liveness_and_readiness() -> None:
    """A verdict holds ``stall`` seconds unless the main loop publishes it again: a loop that
    stops making progress fails both probes (answered at once, not by a timeout), and passes
    again once it runs."""
    port = free_port()
    listener = await serve_probes(Healthy(), "127.0.0.1", port, stall=1.0)
    try:
        assert await answered(port, "/healthz", (200, {"ok": True}))
        # the main loop is wedged from here until the probes say so (30 s at most)
        assert wait_until(lambda: ask(port, "/healthz")[0] == 500, timeout=30, step=0.05)
        assert ask(port, "/healthz") == (500, {"ok": False})
        assert ask(port, "/readyz") == (503, {"ready": False})
        # the loop runs again: it publishes, and the probes pass
        assert await answered(port, "/healthz", (200, {"ok": True}))
        assert await answered(port, "/readyz", (200, {"ready": True}))
    finally:
        await listener.close()


async def test_an_address_that_cannot_be_bound_is_an_error_of_the_start() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        threads = threading.active_count()
        with pytest.raises(OSError, match=r"(?i)address already in use"):
            await serve_probes(Healthy(), "127.0.0.1", port)
    assert wait_until(lambda: threading.active_count() == threads)  # the thread ended


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_verdict_holds_until_its_own_bound_or_the_stall_bound() -> None:
    clock = Clock()
    board = Board(stall=5.0, clock=clock)
    assert not board.healthy() and not board.is_ready()  # nothing published yet
    # healthy until the loop's step is overdue (at 102), ready until the term ends (at 101)
    board.publish(Verdict(healthy_until=102.0, ready_until=101.0))
    clock.now = 100.9
    assert board.healthy() and board.is_ready()
    clock.now = 101.0  # leader strictly before the deadline: not ready at it
    assert board.healthy() and not board.is_ready()
    clock.now = 102.0
    assert not board.healthy()
    # "until further notice" still ends when the main loop stops publishing
    board.publish(Verdict(math.inf, math.inf))
    clock.now = 106.9
    assert board.healthy() and board.is_ready()
    clock.now = 107.0
    assert not board.healthy() and not board.is_ready()
    board.publish(Verdict(NEVER, math.inf))
    assert not board.healthy() and board.is_ready()
