"""``--drain-timeout`` on real sidecar processes and a real redis-server: on SIGTERM the leader
publishes ``leader: false, draining: true``, keeps the lease (renewed) until the app calls
``POST /drained`` or the timeout, then releases; the standby is granted only after that, within
milliseconds of the app's answer."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Observer, Sidecar, wait_until

TTL, DEADLINE, RETRY = 3.0, 2.0, 0.1
APP_WORK = 0.3  # seconds the app needs to finish once it is told to drain


def pair(
    start: Callable[..., Sidecar], server: RedisServer, lock: str, drain: float
) -> tuple[Sidecar, Sidecar]:
    """Two sidecars with ``--drain-timeout``; the first leads, the second waits."""
    extra = ["--drain-timeout", f"{drain:g}"]
    first = start("pod-a", lock, [server.url], ttl=TTL, renew_deadline=DEADLINE,
                  retry_period=RETRY, extra=extra).wait_up()  # fmt: skip
    wait_until(first.is_leader)
    second = start("pod-b", lock, [server.url], ttl=TTL, renew_deadline=DEADLINE,
                   retry_period=RETRY, extra=extra).wait_up()  # fmt: skip
    wait_until(lambda: (second.status() or {}).get("holder") == "pod-a")
    for sc in (first, second):
        wait_until(lambda sc=sc: (sc.status() or {}).get("candidates") == 2)  # type: ignore[misc]
    return first, second


def request(port: int, method: str, path: str, timeout: float = 40.0) -> tuple[int, Any]:
    """(status code, JSON body) on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


class App:
    """The app next to the leader: long-polls its sidecar's ``/status`` (every answer kept, with
    its arrival time) until the sidecar is gone; once told to drain, it finishes its work in
    :data:`APP_WORK` seconds and says so with ``POST /drained`` (unless ``answer`` is False)."""

    def __init__(
        self, sc: Sidecar, standby: Sidecar | None, since: str, answer: bool = True
    ) -> None:
        self.sc, self.standby, self.answer = sc, standby, answer
        self.docs: list[tuple[dict[str, Any], float]] = []  # (status, wall time it arrived)
        self.on_disk: dict[str, Any] | None = None  # the state file when draining was seen
        self.marker_left = True
        self.standby_before: dict[str, Any] | None = None  # read just before the POST
        self.posted: tuple[int, Any, float, float] | None = None  # code, body, sent, done
        self.error: BaseException | None = None
        self._since = since
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        since = self._since
        try:
            while True:
                try:
                    code, doc = request(self.sc.port, "GET", f"/status?wait=30&since={since}")
                except (OSError, http.client.HTTPException):
                    return  # the sidecar exited
                assert code == 200, (code, doc)
                self.docs.append((doc, time.time()))
                since = doc["version"]
                if doc["draining"] and self.posted is None:
                    self._drain()
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc

    def _drain(self) -> None:
        self.on_disk = json.loads(self.sc.state_file.read_text())
        self.marker_left = (self.sc.state_dir / "leader").exists()
        time.sleep(APP_WORK)  # the app's own work, not a synchronisation
        if not self.answer:
            self.posted = (0, None, 0.0, 0.0)
            return
        self.standby_before = self.standby.status() if self.standby else None
        sent = time.time()
        code, body = request(self.sc.port, "POST", "/drained")
        self.posted = (code, body, sent, time.time())

    def join(self, timeout: float = 20.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the app's long-poll did not end"
        if self.error is not None:
            raise self.error


def granted(standby: Sidecar, timeout: float) -> tuple[dict[str, Any], float]:
    """The standby's first ``leader: true`` status (long-polled) and the wall time it arrived."""
    doc = standby.status()
    assert doc is not None
    while not doc["leader"]:
        code, doc = request(standby.port, "GET", f"/status?wait={timeout}&since={doc['version']}")
        assert code == 200, (code, doc)
    return doc, time.time()


def check_old_leader(app: App) -> None:
    """``leader: false`` was published with ``draining: true``, and never ``leader: true``
    after it; the state file said so and the marker was gone before the app was told."""
    docs = [doc for doc, _ in app.docs]
    first = next(i for i, doc in enumerate(docs) if doc["draining"])
    assert docs[first]["leader"] is False and docs[first]["holder"] is None
    assert not any(doc["leader"] for doc in docs[first:])
    assert app.on_disk is not None
    assert app.on_disk["leader"] is False and app.on_disk["draining"] is True
    assert not app.marker_left


@pytest.mark.slow
def test_sigterm_waits_for_the_app_then_hands_off_in_milliseconds(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    old, new = pair(sidecars, redis_server, lock_name, drain=5.0)
    assert request(old.port, "POST", "/drained") == (409, {"error": "not draining"})
    mine = old.status()
    assert mine is not None and mine["leader"] and mine["draining"] is False
    app = App(old, new, mine["version"])
    wait_until(lambda: old.metric("redlease_status_waiting") == 1)
    with Observer([old, new]) as obs:
        signalled = time.time()
        old.signal(signal.SIGTERM)
        doc, seen = granted(new, timeout=30)
        app.join()
        assert old.wait() == 0
    assert obs.violations() == []
    assert app.posted is not None
    code, body, sent, done = app.posted
    assert (code, body) == (200, {"drained": True})
    # the standby was not granted before the app said drained (Redis TIME and time.time() are
    # the same host clock), nor while the app worked
    assert app.standby_before is not None and app.standby_before["leader"] is False
    acquired = epoch(doc["acquired_at"])
    assert acquired >= int(sent * 1000) / 1000, (acquired, sent)
    assert acquired - signalled >= APP_WORK - 0.001  # Redis times are whole milliseconds
    assert acquired - signalled < 5.0  # not the timeout
    assert doc["fencing_token"] > mine["fencing_token"]
    check_old_leader(app)
    assert '"app drained: releasing"' in old.log()
    assert not (old.state_dir / "leader").exists()
    assert json.loads(old.state_file.read_text())["leader"] is False
    handoff = acquired - sent
    assert handoff < 1.0, f"hand-off took {handoff:.3f}s after drained; expected milliseconds"
    print(
        f"drain hand-off: granted {handoff * 1000:.1f} ms after POST /drained was sent; "
        f"the standby's long-poll answered {(seen - done) * 1000:.1f} ms after its 200"
    )


@pytest.mark.slow
def test_a_drain_nobody_answers_ends_at_the_timeout(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """The timeout (2.5 s) is longer than the renew deadline (2 s): the lease is renewed
    meanwhile, so it is held to the timeout and then released, not lost."""
    drain = 2.5
    old, new = pair(sidecars, redis_server, lock_name, drain=drain)
    mine = old.status()
    assert mine is not None and mine["leader"]
    app = App(old, new, mine["version"], answer=False)
    wait_until(lambda: old.metric("redlease_status_waiting") == 1)
    signalled = time.time()
    old.signal(signal.SIGTERM)
    doc, _ = granted(new, timeout=30)
    app.join()
    assert old.wait() == 0
    assert request(new.port, "POST", "/drained")[0] == 409
    elapsed = epoch(doc["acquired_at"]) - signalled
    assert drain - 0.001 <= elapsed < drain + 2.0, elapsed
    assert doc["fencing_token"] > mine["fencing_token"]
    check_old_leader(app)
    log = old.log()
    assert "drain timed out" in log and '"app drained' not in log
    assert '"stopped leading"' not in log  # released by the step-down, never lost


@pytest.mark.slow
def test_a_second_signal_ends_the_drain_at_once(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    old, new = pair(sidecars, redis_server, lock_name, drain=30.0)
    mine = old.status()
    assert mine is not None and mine["leader"]
    old.signal(signal.SIGTERM)
    doc = mine
    while not doc["draining"]:
        code, doc = request(old.port, "GET", f"/status?wait=10&since={doc['version']}")
        assert code == 200, (code, doc)
    assert doc["leader"] is False
    again = time.time()
    old.signal(signal.SIGTERM)
    doc, _ = granted(new, timeout=30)
    assert old.wait() == 0
    assert epoch(doc["acquired_at"]) - again < 1.0
    assert doc["fencing_token"] > mine["fencing_token"]


@pytest.mark.slow
def test_the_hand_off_to_the_preferred_holder_drains_too(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    extra = ["--drain-timeout", "5", "--preferred-holder", "pod-b"]
    old = sidecars("pod-a", lock_name, [redis_server.url], ttl=TTL, renew_deadline=DEADLINE,
                   retry_period=RETRY, extra=extra).wait_up()  # fmt: skip
    wait_until(old.is_leader)
    mine = old.status()
    assert mine is not None
    app = App(old, None, mine["version"])
    wait_until(lambda: old.metric("redlease_status_waiting") == 1)
    new = sidecars("pod-b", lock_name, [redis_server.url], ttl=TTL, renew_deadline=DEADLINE,
                   retry_period=RETRY, extra=extra).wait_up()  # fmt: skip
    doc, _ = granted(new, timeout=30)
    wait_until(lambda: app.posted is not None)  # its answer may come after the grant
    assert app.posted is not None
    code, _body, sent, _done = app.posted
    assert code == 200
    assert epoch(doc["acquired_at"]) >= int(sent * 1000) / 1000
    assert doc["fencing_token"] > mine["fencing_token"]
    assert "hand-off to preferred holder 'pod-b': the app drained" in old.log()
    old.signal(signal.SIGTERM)  # a standby now: exits at once
    assert old.wait() == 0
    app.join()
    check_old_leader(app)


def test_a_sidecar_the_app_stops_before_releases_at_once_on_sigterm(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """``--app-stops-first`` (what injection gives a native sidecar: the kubelet stops the app
    containers first): at SIGTERM the app has exited, nobody can answer a drain, so the lease
    is released at once, never published as draining."""
    extra = ["--drain-timeout", "30", "--app-stops-first"]
    old = sidecars("pod-a", lock_name, [redis_server.url], ttl=TTL, renew_deadline=DEADLINE,
                   retry_period=RETRY, extra=extra).wait_up()  # fmt: skip
    wait_until(old.is_leader)
    new = sidecars("pod-b", lock_name, [redis_server.url], ttl=TTL, renew_deadline=DEADLINE,
                   retry_period=RETRY, extra=extra).wait_up()  # fmt: skip
    wait_until(lambda: (new.status() or {}).get("holder") == "pod-a")
    mine = old.status()
    assert mine is not None and mine["leader"]
    signalled = time.time()
    old.signal(signal.SIGTERM)
    doc, _ = granted(new, timeout=30)
    assert old.wait() == 0
    # far below the 30 s drain (milliseconds unloaded; loose for a busy machine)
    assert epoch(doc["acquired_at"]) - signalled < 5.0
    assert doc["fencing_token"] > mine["fencing_token"]
    log = old.log()
    assert "draining: leader: false published" not in log and "drain timed out" not in log
