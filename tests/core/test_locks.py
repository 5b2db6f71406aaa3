"""Behaviour of the blocking API on a single redis-server and on a 3-master cluster."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import pytest

import redlease
from redlease import (
    AlreadyHeld,
    LockContention,
    LockTimeout,
    NotOwned,
)
from redlease.core import _sync, flows
from redlease.core.keys import LockKeys
from redlease.devtools.polling import wait_until


def test_acquire_release_and_state(any_client: Any, lock_name: str) -> None:
    lock = redlease.Lock(any_client, lock_name, ttl=5, identity="alice")
    lease = lock.acquire()
    assert lease.fencing_token > 0 and lease.valid
    assert 4.8 < lease.remaining() <= 5.0
    state = lock.state()
    assert state.holder == "alice" and state.fencing_token == lease.fencing_token
    assert state.expires_in_ms is not None and 4000 < state.expires_in_ms <= 5000
    assert state.acquired_ms == lease.acquired_at_ms
    lock.release()
    assert lock.state().holder is None
    assert lock.state().last_fence == lease.fencing_token


def test_second_owner_is_refused_and_names_holder(any_client: Any, lock_name: str) -> None:
    a = redlease.Lock(any_client, lock_name, identity="a")
    b = redlease.Lock(any_client, lock_name, identity="b")
    a.acquire()
    with pytest.raises(LockContention) as err:
        b.acquire(blocking=False)
    assert err.value.holder == "a" and err.value.lock == lock_name
    assert lock_name in str(err.value)
    with pytest.raises(AlreadyHeld):
        a.acquire(blocking=False)


def test_release_and_extend_by_non_owner_are_refused(any_client: Any, lock_name: str) -> None:
    a = redlease.Lock(any_client, lock_name, ttl=0.3, identity="a")
    b = redlease.Lock(any_client, lock_name, ttl=5, identity="b")
    a.acquire()
    wait_until(lambda: a.state().holder is None)  # a's lease expires
    b_lease = b.acquire(blocking=False)
    with pytest.raises(NotOwned):
        a.release()
    assert not a.owned()
    # a forged owner token is refused by the scripts themselves, not only locally
    node = _sync.SyncNode(any_client, lock_name)
    with pytest.raises(NotOwned):
        _sync.drive(node, flows.release(b.prim, "f" * 32))
    with pytest.raises(NotOwned):
        _sync.drive(node, flows.extend(b.prim, "f" * 32, 60))
    state = b.state()
    assert state.holder == "b" and state.fencing_token == b_lease.fencing_token


def test_extend_pushes_expiry_and_deadline(any_client: Any, lock_name: str) -> None:
    lock = redlease.Lock(any_client, lock_name, ttl=1)
    lease = lock.acquire()
    before = lease.deadline
    lock.extend(10)
    assert lease.deadline > before + 8
    assert lock.state().expires_in_ms is not None and lock.state().expires_in_ms > 9000  # type: ignore[operator]
    lock.release()


def test_fencing_tokens_increase_across_holders_and_expiry(any_client: Any, lock_name: str) -> None:
    tokens = []
    for i in range(5):
        lock = redlease.Lock(any_client, lock_name, ttl=0.2, identity=f"h{i}")
        tokens.append(lock.acquire(timeout=5).fencing_token)
        if i % 2:
            lock.release()  # the others just expire
    assert tokens == sorted(tokens) and len(set(tokens)) == 5


def test_a_fence_counter_ahead_of_the_clock_is_followed(any_client: Any, lock_name: str) -> None:
    """The token rule (``grant``: max of counter + 1 and the server clock in us) on the
    uncontended path (scripts.ACQUIRE's first branch) and on a re-entry after a release."""
    fence = LockKeys.for_name(lock_name).fence
    ahead = 9_000_000_000_000_000  # above any server clock in us, below 2**53
    any_client.set(fence, ahead)
    lock = redlease.Lock(any_client, lock_name, ttl=10)
    assert lock.acquire().fencing_token == ahead + 1
    lock.release()
    assert lock.acquire().fencing_token == ahead + 2
    lock.release()
    assert int(any_client.get(fence)) == ahead + 2


def test_honest_timeout(any_client: Any, lock_name: str) -> None:
    redlease.Lock(any_client, lock_name, ttl=30).acquire()
    waiter = redlease.Lock(any_client, lock_name)
    for timeout in (0.05, 0.3):
        start = time.monotonic()
        with pytest.raises(LockTimeout):
            waiter.acquire(timeout=timeout)
        elapsed = time.monotonic() - start
        assert elapsed >= timeout, "gave up early"
        # the overshoot's size is `make bench`'s; this catches a whole fallback step slept past
        assert elapsed < timeout + 2.0, f"overshot by {elapsed - timeout:.3f}s"
    assert redlease.Lock(any_client, lock_name).state().waiters == 0


def test_waiter_is_woken_by_release_not_by_a_poll(any_client: Any, lock_name: str) -> None:
    """A waiter blocked behind a 30 s lease gets it within milliseconds of the release."""
    holder = redlease.Lock(any_client, lock_name, ttl=30)
    delays = []
    for _ in range(15):
        holder.acquire()
        got = threading.Event()
        got_at: list[float] = []

        def wait(got: threading.Event = got, got_at: list[float] = got_at) -> None:
            w = redlease.Lock(any_client, lock_name, ttl=30)
            w.acquire(timeout=20)
            got_at.append(time.monotonic())
            got.set()
            w.release()

        t = threading.Thread(target=wait)
        t.start()
        wait_until(lambda: holder.state().waiters == 1)
        released_at = time.monotonic()
        holder.release()
        assert got.wait(10)
        t.join()
        delays.append(got_at[0] - released_at)
    assert statistics.median(delays) < 0.01, delays
    assert max(delays) < 1.0, delays  # a poll would take the 5 s fallback step


def test_waiter_is_woken_at_expiry_of_a_crashed_holder(any_client: Any, lock_name: str) -> None:
    crashed = redlease.Lock(any_client, lock_name, ttl=0.4)
    first = crashed.acquire()  # never released
    start = time.monotonic()
    lease = redlease.Lock(any_client, lock_name, ttl=5).acquire(timeout=10)
    assert 0.3 < time.monotonic() - start < 1.5
    assert lease.fencing_token > first.fencing_token


def test_context_manager_and_hold_with_renewal(any_client: Any, lock_name: str) -> None:
    # a TTL that leaves a renewal 0.6 s of slack on a busy machine (ttl 0.3 once lost leases there)
    lock = redlease.Lock(any_client, lock_name, ttl=1.0)
    with lock as lease:
        assert lease.fencing_token > 0
    assert lock.state().holder is None
    with lock.hold(timeout=1) as lease:
        # held past the TTL: only renewal keeps it
        end = time.monotonic() + 1.6
        while time.monotonic() < end:
            assert lease.valid
            assert lock.state().holder is not None
            time.sleep(0.05)
    assert lock.state().holder is None


def test_renewer_signals_loss_when_taken_over(any_client: Any, lock_name: str) -> None:
    lock = redlease.Lock(any_client, lock_name, ttl=0.6)
    lock.acquire()
    lost = threading.Event()
    with redlease.Renewer(lock, on_lost=lambda e: lost.set()) as renewer:
        # an operator force-releases the lease: the next renewal is refused
        keys = lock.keys
        any_client.delete(keys.lease)
        assert lost.wait(5)
        assert renewer.lost.is_set()
    assert not lock.owned()


def test_renewer_retries_an_unexpected_error_until_the_deadline(
    any_client: Any, lock_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one rule (core/term.py classify): an error that is not a refusal (here a bug in
    a client library) is retried, not the end of the renewer; when every renewal fails, the
    lease is lost at its local deadline, with the callback."""
    lock = redlease.Lock(any_client, lock_name, ttl=1.0)
    lock.acquire()
    failures, renewals = [0], [0]
    extend = lock.extend

    def flaky(**kwargs: Any) -> Any:
        if failures[0] < 1:
            failures[0] += 1
            raise RuntimeError("client library bug")
        lease = extend(**kwargs)
        renewals[0] += 1
        return lease

    monkeypatch.setattr(lock, "extend", flaky)
    lost = threading.Event()
    with redlease.Renewer(lock, on_lost=lambda e: lost.set()) as renewer:
        # the renewer went on after the failure and renewed
        wait_until(lambda: renewals[0] >= 1, 10)
        assert failures[0] == 1 and not renewer.lost.is_set() and lock.owned()

        def broken(**kwargs: Any) -> Any:
            raise RuntimeError("client library bug")

        monkeypatch.setattr(lock, "extend", broken)
        assert lost.wait(10)  # the local deadline, under the TTL
        assert renewer.lost.is_set()


def test_reentrant_counts(any_client: Any, lock_name: str) -> None:
    lock = redlease.ReentrantLock(any_client, lock_name, identity="r")
    first = lock.acquire()
    again = lock.acquire()
    assert again is first and lock.count() == 2 and lock.state().count == 2
    other = redlease.ReentrantLock(any_client, lock_name, identity="o")
    with pytest.raises(LockContention):
        other.acquire(blocking=False)
    lock.release()
    assert lock.state().holder == "r"
    lock.release()
    assert lock.state().holder is None
    with pytest.raises(NotOwned):
        lock.release()


def test_reentrant_owner_is_explicit(any_client: Any, lock_name: str) -> None:
    lock = redlease.ReentrantLock(any_client, lock_name)
    job_a, job_b = object(), object()
    lock.acquire(owner=job_a)
    with pytest.raises(LockContention):
        lock.acquire(blocking=False, owner=job_b)
    lock.acquire(owner=job_a)
    assert lock.count(job_a) == 2 and lock.count(job_b) == 0
    # another thread is another owner by default
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            lock.acquire(blocking=False)
        except LockContention as exc:
            errors.append(exc)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert len(errors) == 1
    lock.release(owner=job_a)
    lock.release(owner=job_a)


def test_readers_share_writer_excludes(any_client: Any, lock_name: str) -> None:
    rw = redlease.ReadWriteLock(any_client, lock_name, ttl=10)
    r1, r2, w = rw.reader(), rw.reader(), rw.writer()
    r1.acquire()
    r2.acquire()
    assert r1.state().readers == 2
    with pytest.raises(LockContention):
        w.acquire(blocking=False)
    r1.release()
    r2.release()
    wl = w.acquire(blocking=False)
    assert wl.fencing_token > 0
    with pytest.raises(LockContention):
        rw.reader().acquire(blocking=False)
    w.release()
    rl = rw.reader().acquire(blocking=False)
    assert rl.fencing_token == wl.fencing_token  # readers see the current fence, not raise it


def test_waiting_writer_is_not_starved_by_readers(any_client: Any, lock_name: str) -> None:
    rw = redlease.ReadWriteLock(any_client, lock_name, ttl=10)
    stop = threading.Event()
    overlaps = [0]

    def reader_stream() -> None:
        r = rw.reader()
        while not stop.is_set():
            try:
                r.acquire(timeout=0.5)
            except LockTimeout:
                continue
            time.sleep(0.02)
            r.release()

    threads = [threading.Thread(target=reader_stream) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: rw.reader().state().readers > 0)
        start = time.monotonic()
        w = rw.writer()
        w.acquire(timeout=5)
        waited = time.monotonic() - start
        overlaps[0] = w.state().readers
        w.release()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert overlaps[0] == 0
    assert waited < 1.0, f"writer waited {waited:.2f}s behind a stream of readers"


def test_crashed_reader_share_expires(any_client: Any, lock_name: str) -> None:
    rw = redlease.ReadWriteLock(any_client, lock_name, ttl=0.4)
    rw.reader().acquire()  # the reader "crashes": never releases, never renews
    start = time.monotonic()
    redlease.ReadWriteLock(any_client, lock_name, ttl=5).writer().acquire(timeout=10)
    assert 0.3 < time.monotonic() - start < 1.5


def test_mutual_exclusion_between_threads(any_client: Any, lock_name: str) -> None:
    inside = [0]
    max_inside = [0]
    guard = threading.Lock()

    def worker() -> None:
        lock = redlease.Lock(any_client, lock_name, ttl=10)
        for _ in range(30):
            with lock:
                with guard:
                    inside[0] += 1
                    max_inside[0] = max(max_inside[0], inside[0])
                time.sleep(0.0005)
                with guard:
                    inside[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max_inside[0] == 1


def test_reentrant_hold_renews_for_the_calling_thread(any_client: Any, lock_name: str) -> None:
    lock = redlease.ReentrantLock(any_client, lock_name, ttl=1.0)
    with lock.hold() as lease:
        end = time.monotonic() + 1.6  # past the TTL: only renewal (for this thread) keeps it
        while time.monotonic() < end:
            assert lease.valid
            time.sleep(0.05)
        assert lock.state().holder is not None
    assert lock.state().holder is None


def test_reacquire_after_unreleased_expiry_gets_a_new_token(
    any_client: Any, lock_name: str
) -> None:
    """Found by the chaos run: a hold whose release failed (outage) and then expired must not
    hand back its old lease object (and old fencing token) on the next acquisition."""
    lock = redlease.Lock(any_client, lock_name, ttl=0.2)
    first = lock.acquire()
    other = redlease.Lock(any_client, lock_name, ttl=0.2)
    second = other.acquire(timeout=5)  # first expired without a release
    other.release()
    third = lock.acquire(timeout=5)
    assert third.fencing_token > second.fencing_token > first.fencing_token
    assert third is not first
    assert not first.valid
    lock.release()
