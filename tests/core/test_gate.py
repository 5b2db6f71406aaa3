"""The per-pool request gate (core/gate.py): at most GATE requests in flight per pool and
process, no lost wake-up on its lock-free fast path, a bounded wait."""

from __future__ import annotations

import threading

from redlease.core import gate


def test_never_more_than_gate_slots_taken_and_every_waiter_served() -> None:
    g = gate.Gate()
    inside = 0
    peak = 0
    count = threading.Lock()
    done = []

    def worker() -> None:
        nonlocal inside, peak
        for _ in range(100):
            assert g.take(timeout=30.0)
            with count:
                inside += 1
                peak = max(peak, inside)
            with count:
                inside -= 1
            g.release()
        done.append(1)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(done) == 16  # nobody stuck: no wake-up lost between a release and a wait
    assert peak <= gate.GATE


def test_a_waiter_is_woken_by_a_release_and_a_full_gate_times_out() -> None:
    g = gate.Gate(slots=1)
    assert g.take(timeout=0)
    assert not g.take(timeout=0.05)  # full: the wait ends at its bound
    got = threading.Event()

    def waiter() -> None:
        if g.take(timeout=30.0):
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    # the waiter is counted in before it sleeps; the release must wake it, not leave it
    pause = threading.Event()
    for _ in range(30_000):  # until it waits (at most ~30 s)
        if g._waiting:
            break
        pause.wait(0.001)
    assert g._waiting == 1
    g.release()
    assert got.wait(30.0)
    t.join(30)
