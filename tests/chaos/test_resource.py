"""The chaos resource's fencing rule on a real redis-server: the highest token seen may write
(a mutex), or for a counting semaphore of limit N any token among the N highest seen."""

from __future__ import annotations

from chaos.resource import Resource
from redlease.devtools.localredis import RedisServer


def test_a_mutex_resource_accepts_only_the_highest(redis_server: RedisServer) -> None:
    r = Resource(redis_server.client())
    assert [r.write(t, "c", 0.0) for t in (5, 7, 6, 7)] == [True, True, False, True]


def test_a_semaphore_resource_accepts_the_limit_highest(redis_server: RedisServer) -> None:
    r = Resource(redis_server.client(), limit=2)
    # 6 is among the 2 highest seen (7, 6); then 5 is overtaken by two newer tokens
    got = [r.write(t, "c", 0.0) for t in (5, 7, 6, 5, 7, 6)]
    assert got == [True, True, True, False, True, True]
    assert [a["max_before"] for a in r.attempts()] == [-1, -1, 5, 6, 6, 6]
