"""`redlease retire`: a free lock's keys all go (fence counter included); a lock in use, or a
node set with a node down, keeps every key everywhere."""

from __future__ import annotations

import subprocess
import sys

import redlease
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, env


def retire(name: str, *urls: str, yes: bool = True) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "redlease", "retire", "--lock", name]
    args += [a for u in urls for a in ("--redis", u)] + (["--yes"] if yes else [])
    return subprocess.run(args, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60)


def lock_keys(server: RedisServer, name: str) -> list[bytes]:
    c = server.client()
    try:
        return sorted(c.keys(f"redlease:{{{name}}}*"))  # type: ignore[arg-type]
    finally:
        c.close()


def test_retire_a_free_lock_and_refuse_one_in_use(redis_server: RedisServer) -> None:
    client = redis_server.client()
    lock = redlease.Lock(client, "old-job", ttl=30, identity="worker")
    lock.acquire()
    assert lock_keys(redis_server, "old-job")  # lease, fence, history
    held = retire("old-job", redis_server.url)
    assert held.returncode == 1 and "not retired: held by worker" in held.stdout
    assert lock_keys(redis_server, "old-job")
    lock.release()
    asked = retire("old-job", redis_server.url, yes=False)
    assert asked.returncode == 2 and asked.stderr.count("\n") == 1 and "--yes" in asked.stderr
    done = retire("old-job", redis_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "retired (" in done.stdout and lock_keys(redis_server, "old-job") == []
    client.close()


def test_a_node_down_retires_nothing(redis_nodes: list[RedisServer]) -> None:
    from redlease.quorum import NodeSet

    ns = NodeSet([s.client() for s in redis_nodes])
    lock = redlease.Lock(ns, "spread", ttl=30)
    lock.acquire()
    lock.release()
    ns.close()
    redis_nodes[2].kill()
    out = retire("spread", *(s.url for s in redis_nodes))
    assert out.returncode == 1 and "not retired" in out.stdout
    assert all(lock_keys(s, "spread") for s in redis_nodes[:2])  # untouched where it answered


def test_a_held_semaphore_slot_is_not_retired(redis_server: RedisServer) -> None:
    """Slot 0 free, slot 1 held: the view sees no holder there, the script still refuses."""
    client = redis_server.client()
    first, second = (redlease.Semaphore(client, "pool", limit=2, ttl=30) for _ in range(2))
    first.acquire()
    second.acquire()  # slot 1
    first.release()
    out = retire("pool", redis_server.url)
    assert out.returncode == 1 and "not retired: held" in out.stdout
    assert b"redlease:{pool}:slot:1" in lock_keys(redis_server, "pool")
    second.release()
    done = retire("pool", redis_server.url)
    assert done.returncode == 0 and lock_keys(redis_server, "pool") == []
    client.close()


def test_what_retire_says_of_later_tokens_is_what_happens(redis_server: RedisServer) -> None:
    """The --yes question said tokens start "from 1 again"; they start from the server clock,
    above the retired lock's (the README's fencing rule), and the question says so."""
    client = redis_server.client()
    lock = redlease.Lock(client, "renamed-job", ttl=30, identity="worker")
    before = lock.acquire().fencing_token
    lock.release()
    asked = retire("renamed-job", redis_server.url, yes=False)
    assert "from 1" not in asked.stderr and "server's clock" in asked.stderr, asked.stderr
    assert retire("renamed-job", redis_server.url).returncode == 0
    assert lock.acquire().fencing_token > before
    lock.release()
