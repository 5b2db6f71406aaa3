"""Several OS processes against a real redis-server: exclusion, crashes, pauses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import redlease
from redlease.devtools import lockworker
from redlease.devtools.localredis import RedisServer
from redlease.devtools.polling import wait_until

WORKER = lockworker.__file__


def spawn(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_no_lost_update_8_processes_x_500(redis_server: RedisServer) -> None:
    procs = [spawn("counter", str(redis_server.port), "ctr", "500") for _ in range(8)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    client = redis_server.client()
    assert int(client.get("ctr:counter") or 0) == 8 * 500
    tokens = [int(t) for out in outputs for t in out.split()]
    assert len(tokens) == 4000
    assert len(set(tokens)) == 4000  # every critical section had its own fencing token
    for out in outputs:  # and each process saw its tokens strictly increase
        mine = [int(t) for t in out.split()]
        assert mine == sorted(mine)


def test_fencing_token_increases_after_holder_is_sigkilled(redis_server: RedisServer) -> None:
    proc = spawn("hold", str(redis_server.port), "k", "0.5")
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[0] == "acquired"
    killed_token = int(line[1])
    proc.kill()
    proc.wait()
    client = redis_server.client()
    lease = redlease.Lock(client, "k", ttl=5).acquire(timeout=10)  # woken at the expiry
    assert lease.fencing_token > killed_token


def test_paused_holder_detects_loss_and_cannot_release_new_lease(
    redis_server: RedisServer,
) -> None:
    proc = spawn("hold", str(redis_server.port), "p", "0.6")
    assert proc.stdout is not None and proc.stdin is not None
    old_token = int(proc.stdout.readline().split()[1])
    client = redis_server.client()
    lock = redlease.Lock(client, "p", ttl=30, identity="new-holder")
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        new = lock.acquire(timeout=10)  # the paused holder's lease expires; we take over
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert new.fencing_token > old_token
    proc.stdin.write("status\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "lost"
    proc.stdin.write("release\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "not-owned"
    proc.wait(10)
    state = lock.state()
    assert state.holder == "new-holder"
    assert state.fencing_token == new.fencing_token


def test_wait_for_replicas_fails_closed(redis_server: RedisServer) -> None:
    replica = RedisServer(extra_args=["--replicaof", "127.0.0.1", str(redis_server.port)]).start()
    try:
        rclient = replica.client()
        wait_until(lambda: rclient.info("replication").get("master_link_status") == "up")
        client = redis.Redis(port=redis_server.port)
        # 2 s: a replica on a busy machine acknowledges late; the paused one costs that once
        lock = redlease.Lock(client, "repl", ttl=10, replicas=1, replica_timeout=2.0)
        lock.acquire()
        lock.extend()
        lock.release()
        replica.pause()
        try:
            with pytest.raises(redlease.ReplicationError) as err:
                lock.acquire(blocking=False)
        finally:
            replica.resume()
        assert "repl" in str(err.value)
        assert lock.state().holder is None  # failed closed: nothing left behind
    finally:
        replica.stop()
