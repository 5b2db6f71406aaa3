"""Stateful property tests: the reentrant and read-write locks against simple models.

Hypothesis drives random sequences of non-blocking acquires and releases by several owners
against a real redis-server and checks every reply and the server state against a model.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import redlease
from redlease.devtools.localredis import RedisServer

_ids = itertools.count()
SETTINGS = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def model_client() -> Iterator[redis.Redis]:
    with RedisServer() as server:
        client = server.client()
        yield client
        client.close()


OWNERS = ("a", "b", "c")


def test_reentrant_lock_matches_model(model_client: redis.Redis) -> None:
    class ReentrantModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.lock = redlease.ReentrantLock(model_client, f"re-{next(_ids)}", ttl=60)
            self.holder: str | None = None
            self.count = 0

        @rule(owner=st.sampled_from(OWNERS))
        def acquire(self, owner: str) -> None:
            if self.holder in (None, owner):
                lease = self.lock.acquire(blocking=False, owner=owner)
                self.holder, self.count = owner, self.count + 1
                assert lease.count == self.count
            else:
                with pytest.raises(redlease.LockContention):
                    self.lock.acquire(blocking=False, owner=owner)

        @rule(owner=st.sampled_from(OWNERS))
        def release(self, owner: str) -> None:
            if self.holder == owner:
                self.lock.release(owner=owner)
                self.count -= 1
                if self.count == 0:
                    self.holder = None
            else:
                with pytest.raises(redlease.NotOwned):
                    self.lock.release(owner=owner)

        @invariant()
        def server_agrees(self) -> None:
            state = self.lock.state()
            assert (state.holder is not None) == (self.holder is not None)
            assert state.count == self.count
            for owner in OWNERS:
                assert self.lock.count(owner) == (self.count if owner == self.holder else 0)

    ReentrantModel.TestCase.settings = SETTINGS
    ReentrantModel.TestCase().runTest()


def test_read_write_lock_matches_model(model_client: redis.Redis) -> None:
    class ReadWriteModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.rw = redlease.ReadWriteLock(model_client, f"rw-{next(_ids)}", ttl=60)
            self.handles = {
                **{f"r{i}": self.rw.reader() for i in range(3)},
                **{f"w{i}": self.rw.writer() for i in range(2)},
            }
            self.readers: set[str] = set()
            self.writer: str | None = None
            self.fence = 0

        @rule(who=st.sampled_from(["r0", "r1", "r2", "w0", "w1"]))
        def acquire(self, who: str) -> None:
            handle = self.handles[who]
            mine = who in self.readers or who == self.writer
            if mine:
                with pytest.raises(redlease.AlreadyHeld):
                    handle.acquire(blocking=False)
                return
            if who.startswith("r"):
                ok = self.writer is None
            else:
                ok = self.writer is None and not self.readers
            if not ok:
                with pytest.raises(redlease.LockContention):
                    handle.acquire(blocking=False)
                return
            lease = handle.acquire(blocking=False)
            if who.startswith("r"):
                self.readers.add(who)
                assert lease.fencing_token == self.fence
            else:
                self.writer = who
                assert lease.fencing_token > self.fence  # above every earlier token
                self.fence = lease.fencing_token

        @rule(who=st.sampled_from(["r0", "r1", "r2", "w0", "w1"]))
        def release(self, who: str) -> None:
            handle = self.handles[who]
            if who in self.readers or who == self.writer:
                handle.release()
                self.readers.discard(who)
                if self.writer == who:
                    self.writer = None
            else:
                with pytest.raises(redlease.NotOwned):
                    handle.release()

        @invariant()
        def server_agrees(self) -> None:
            state = self.rw.writer().state()
            assert state.readers == len(self.readers)
            assert (state.holder is not None) == (self.writer is not None)
            assert state.last_fence == self.fence
            assert not (self.readers and self.writer)

    ReadWriteModel.TestCase.settings = SETTINGS
    ReadWriteModel.TestCase().runTest()
