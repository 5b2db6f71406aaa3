"""The status document's ``version`` (what changes it, what does not) and the wake-up of
waiters; the long-poll's query parameters (pure, no I/O)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from redlease.core.state import LockState
from redlease.core.view import LockView, lock_view
from redlease.sidecar.changes import MAX_WAIT, Changes
from redlease.sidecar.election import Candidate
from redlease.sidecar.status import document
from redlease.sidecar.web import BadParameter, long_poll

from .test_election import CFG, grant, leader, renewed

WALL = 1_800_000_000.0


def view(holder: str | None, token: int = 7, down: bool = False, left: int = 9000) -> LockView:
    """A view over two nodes (quorum 1), both showing ``holder`` with ``token`` and ``left`` ms;
    ``down``: the second node did not answer."""
    one = LockState(name="L", now_ms=0, holder=holder, fencing_token=token if holder else None,
                    expires_in_ms=left if holder else None)  # fmt: skip
    second: Any = ConnectionError("refused") if down else {"L": one}
    return lock_view(["L"], {"a": {"L": one}, "b": second}, 1)


def stamped(changes: Changes, e: Candidate, now: float) -> dict[str, Any]:
    return changes.stamp(document(e, now, WALL + now))


def test_version_is_stable_across_renewals_and_countdowns() -> None:
    changes = Changes()
    e = leader()
    first = stamped(changes, e, 101.0)
    renewed(e, sent_at=102.0, server_ms=2000, lease_deadline=117.0)
    second = stamped(changes, e, 103.5)
    assert first["renewed_at"] != second["renewed_at"]
    assert first["leader_until"] != second["leader_until"]
    assert first["expires_in_ms"] != second["expires_in_ms"]
    assert first["version"] == second["version"]


def test_version_of_a_follower_is_stable_while_the_holder_renews() -> None:
    changes = Changes()
    e = Candidate(CFG)
    e.observe(view("other", left=9000), 10.0)
    first = stamped(changes, e, 10.5)
    e.observe(view("other", left=14000), 12.0)
    assert stamped(changes, e, 13.0)["version"] == first["version"]


@pytest.mark.parametrize(
    "change",
    ["leader", "holder", "token", "nodes"],
)
def test_version_changes_with_what_the_view_says(change: str) -> None:
    changes = Changes()
    e = Candidate(CFG)
    e.observe(view("other"), 10.0)
    before = stamped(changes, e, 10.1)
    if change == "leader":
        grant(e, fencing_token=8, server_ms=1, transitions=4, sent_at=11.0, lease_deadline=25.0)
    elif change == "holder":
        e.observe(view("third", token=8), 11.0)
    elif change == "token":
        e.observe(view("other", token=8), 11.0)
    else:
        e.observe(view("other", down=True), 11.0)
    after = stamped(changes, e, 11.1)
    assert after["version"] != before["version"]
    assert after["leader"] is (change == "leader")


def test_a_change_back_is_a_new_version_and_boots_differ() -> None:
    changes = Changes()
    e = Candidate(CFG)
    e.observe(view("other"), 10.0)
    v1 = stamped(changes, e, 10.1)["version"]
    e.observe(view("other", down=True), 11.0)
    v2 = stamped(changes, e, 11.1)["version"]
    e.observe(view("other"), 12.0)
    v3 = stamped(changes, e, 12.1)["version"]
    assert len({v1, v2, v3}) == 3
    assert Changes().stamp({})["version"] != Changes().stamp({})["version"]


async def test_waiters_wake_on_a_new_version_not_on_the_same() -> None:
    changes = Changes()
    v = changes.stamp({"holder": "a"})["version"]
    waiters = [asyncio.create_task(changes.wait(v, 30.0)) for _ in range(100)]
    await asyncio.sleep(0)
    assert changes.waiting == 100
    changes.stamp({"holder": "a", "expires_in_ms": 5})  # a countdown: no wake-up
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    changes.stamp({"holder": "b"})
    await asyncio.wait_for(asyncio.gather(*waiters), 5.0)
    assert changes.waiting == 0


async def test_wait_returns_at_once_for_a_stale_version_after_its_timeout_and_on_close() -> None:
    changes = Changes()
    v = changes.stamp({"holder": "a"})["version"]
    await asyncio.wait_for(changes.wait("stale", 30.0), 1.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await changes.wait(v, 0.05)
    assert loop.time() - started >= 0.05
    waiter = asyncio.create_task(changes.wait(v, 30.0))
    await asyncio.sleep(0)
    changes.close()
    await asyncio.wait_for(waiter, 1.0)


def test_long_poll_parameters() -> None:
    assert long_poll({}) is None
    assert long_poll({"since": "ab12.3"}) is None
    assert long_poll({"wait": "10", "since": "ab12.3"}) == (10.0, "ab12.3")
    assert long_poll({"wait": "0.5"}) == (0.5, None)
    assert long_poll({"wait": "3600"}) == (MAX_WAIT, None)
    # the one duration grammar of every CLI flag and env var (core/durations.py)
    assert long_poll({"wait": "10s"}) == (10.0, None)
    assert long_poll({"wait": "500ms", "since": "ab12.3"}) == (0.5, "ab12.3")
    assert long_poll({"wait": "1m30s"}) == (MAX_WAIT, None)
    for bad in ("", "-1", "nan", "inf", "10x", "-1s", "soon"):
        with pytest.raises(BadParameter) as err:
            long_poll({"wait": bad})
        assert err.value.name == "wait" and str(err.value).startswith("wait: ")
    for bad in ("", "a b", "x" * 65, "v/1"):
        with pytest.raises(BadParameter) as err:
            long_poll({"wait": "1", "since": bad})
        assert err.value.name == "since"


def test_holders_countdowns_do_not_move_the_version_but_a_new_holder_does() -> None:
    changes = Changes()

    def doc(*holders: tuple[str, int, int]) -> dict[str, Any]:
        listed = [{"holder": h, "fencing_token": t, "expires_in_ms": ms} for h, t, ms in holders]
        return changes.stamp({"leader": True, "holders": listed})

    first = doc(("a", 1, 9000), ("b", 2, 8000))["version"]
    assert doc(("a", 1, 4000), ("b", 2, 3000))["version"] == first
    assert doc(("a", 1, 4000), ("c", 3, 9000))["version"] != first
