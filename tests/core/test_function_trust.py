"""Code that runs in Redis is redlease's own: another ACL user who loads a library under
redlease's library name (``FUNCTION LOAD REPLACE``) does not get it called by redlease clients
(real servers, real ACL users; Redis 6.2 has no Functions and skips)."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio

import redlease
import redlease.aio
from redlease import LockContention
from redlease.core import requests, scripts
from redlease.core import scripting as policy
from redlease.core.client import scripting
from redlease.devtools.localredis import RedisServer
from redlease.quorum import NodeSet

# redlease's library with one change: its acquire deletes the lease (KEYS[1]) first
_HEAD = (
    f"redis.register_function('{scripts.ACQUIRE.function}', function(KEYS, ARGV)\nnow_cache = nil\n"
)
EVIL = scripts.LIBRARY.replace(_HEAD, _HEAD + "redis.call('DEL', KEYS[1])\n")

# bob may not touch Functions at all, may only list them (as the check needs), or may load
BOB_RIGHTS = {
    "no-function": ["-function"],
    "function-list": ["-function", "+function|list"],
    "function-all": [],
}


def _user(server: RedisServer, name: str, **kwargs: object) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1", port=server.port, username=name, password=f"{name}-pw", **kwargs
    )  # type: ignore[arg-type]


def _tenants(server: RedisServer, bob: list[str]) -> None:
    """alice owns the keys of the locks ``a-*``, bob those of ``b-*`` (with the rights ``bob``)."""
    admin = server.client()
    try:
        admin.execute_command("FUNCTION", "LIST")
    except redis.ResponseError:
        pytest.skip(f"{server.binary} has no Functions (Redis 6.2): EVALSHA only")
    finally:
        admin.close()
    admin = server.client()
    base = ["on", "resetchannels", "&*", "+@all"]
    admin.execute_command("ACL", "SETUSER", "alice", *base, ">alice-pw", "~redlease:{a-*")
    admin.execute_command("ACL", "SETUSER", "bob", *base, *bob, ">bob-pw", "~redlease:{b-*")
    admin.close()


def _evil(server: RedisServer) -> None:
    """alice loads the evil library under redlease's name."""
    alice = _user(server, "alice")
    loaded = alice.execute_command("FUNCTION", "LOAD", "REPLACE", EVIL)
    assert loaded == scripts.LIBRARY_NAME.encode()
    alice.close()


@pytest.fixture(params=list(BOB_RIGHTS))
def shared(redis_server: RedisServer, request: pytest.FixtureRequest) -> RedisServer:
    """alice loaded the evil library before bob's clients start."""
    _tenants(redis_server, BOB_RIGHTS[request.param])
    _evil(redis_server)
    return redis_server


@pytest.fixture
def shared_bob(redis_server: RedisServer) -> RedisServer:
    """alice and bob (who may list functions) share a server where an administrator loaded
    redlease's library."""
    _tenants(redis_server, BOB_RIGHTS["function-list"])
    admin = redis_server.client()
    admin.execute_command("FUNCTION", "LOAD", scripts.LIBRARY)
    admin.close()
    return redis_server


def test_evil_library_gives_no_second_holder(shared: RedisServer) -> None:
    one, two = _user(shared, "bob"), _user(shared, "bob")
    first = redlease.Lock(one, "b-leader", ttl=30).acquire(blocking=False)
    with pytest.raises(LockContention):
        redlease.Lock(two, "b-leader", ttl=30).acquire(blocking=False)
    state = redlease.Lock(two, "b-leader", ttl=30).state()
    assert state.fencing_token == first.fencing_token
    run = scripting(one.connection_pool)
    assert not run.functions  # the library under redlease's name is not redlease's code
    stats = shared.client().info("commandstats")
    assert "cmdstat_fcall" not in stats
    one.close()
    two.close()


def test_evil_library_gives_no_second_holder_asyncio(shared: RedisServer) -> None:
    async def main() -> None:
        kwargs = {"host": "127.0.0.1", "port": shared.port, "password": "bob-pw"}
        one = redis.asyncio.Redis(username="bob", **kwargs)  # type: ignore[arg-type]
        two = redis.asyncio.Redis(username="bob", **kwargs)  # type: ignore[arg-type]
        first = await redlease.aio.Lock(one, "b-leader", ttl=30).acquire(blocking=False)
        with pytest.raises(LockContention):
            await redlease.aio.Lock(two, "b-leader", ttl=30).acquire(blocking=False)
        state = await redlease.aio.Lock(two, "b-leader", ttl=30).state()
        assert state.fencing_token == first.fencing_token
        await one.aclose()
        await two.aclose()

    asyncio.run(main())
    assert "cmdstat_fcall" not in shared.client().info("commandstats")


@pytest.mark.parametrize("redis_nodes", [3], indirect=True)
def test_evil_library_gives_no_second_holder_quorum(redis_nodes: list[RedisServer]) -> None:
    for server in redis_nodes:
        _tenants(server, [*BOB_RIGHTS["function-all"], "~redlease:node"])  # + the marker
        _evil(server)
    urls = [f"redis://bob:bob-pw@127.0.0.1:{s.port}/0" for s in redis_nodes]
    one, two = NodeSet.from_urls(urls), NodeSet.from_urls(urls)
    first = redlease.Lock(one, "b-leader", ttl=30).acquire(blocking=False)
    with pytest.raises(LockContention):
        redlease.Lock(two, "b-leader", ttl=30).acquire(blocking=False)
    assert first.fencing_token > 0
    for server in redis_nodes:
        assert "cmdstat_fcall" not in server.client().info("commandstats")
    one.close()
    two.close()


def test_verified_library_is_called_and_checked_once(redis_server: RedisServer) -> None:
    """redlease's own library (loaded by another client) is verified once per server, then
    FCALL'd: one extra round trip at first contact."""
    admin = redis_server.client()
    try:
        admin.execute_command("FUNCTION", "LOAD", "REPLACE", scripts.LIBRARY)
    except redis.ResponseError:
        pytest.skip(f"{redis_server.binary} has no Functions (Redis 6.2): EVALSHA only")
    admin.config_resetstat()
    client = redis_server.client()
    lock = redlease.Lock(client, "mine", ttl=5)
    for _ in range(3):
        with lock:
            pass
    stats = admin.info("commandstats")
    assert stats["cmdstat_function|list"]["calls"] == 1
    assert stats["cmdstat_fcall"]["calls"] == 6 and "cmdstat_evalsha" not in stats
    assert scripting(client.connection_pool).verified
    client.close()
    admin.close()


def test_library_verdict_reads_both_protocols() -> None:
    resp2 = [
        [
            b"library_name",
            scripts.LIBRARY_NAME.encode(),
            b"engine",
            b"LUA",
            b"functions",
            [],
            b"library_code",
            scripts.LIBRARY.encode(),
        ]
    ]
    resp3 = [{b"library_name": scripts.LIBRARY_NAME.encode(), b"library_code": EVIL.encode()}]
    assert policy.library_verdict(resp2) is True
    assert policy.library_verdict(resp3) is False
    assert policy.library_verdict([]) is None
    assert policy.library_verdict(redis.ResponseError("NOPERM no permissions")) is False


def test_library_replaced_after_verification_is_rechecked(shared_bob: RedisServer) -> None:
    """bob's clients verified redlease's library and use it; alice then replaces it. Once the
    check is due again (aged here rather than waited for), bob's clients use EVALSHA."""
    server = shared_bob
    one, two = _user(server, "bob"), _user(server, "bob")
    with redlease.Lock(one, "b-leader", ttl=30), pytest.raises(LockContention):
        redlease.Lock(two, "b-leader", ttl=30).acquire(blocking=False)
    runs = [scripting(c.connection_pool) for c in (one, two)]
    assert all(r.functions and r.verified for r in runs)
    _evil(server)
    for run in runs:
        run.checked -= policy.RECHECK
    first = redlease.Lock(one, "b-leader", ttl=30).acquire(blocking=False)
    with pytest.raises(LockContention):
        redlease.Lock(two, "b-leader", ttl=30).acquire(blocking=False)
    assert first.fencing_token > 0 and not any(r.functions for r in runs)
    one.close()
    two.close()


def test_squatted_function_name_is_refused(shared_bob: RedisServer) -> None:
    """After a verified FCALL finds its function gone, the library is checked again; a library
    under another name holding one of redlease's function names makes our load fail: EVALSHA."""
    server = shared_bob
    one, two = _user(server, "bob"), _user(server, "bob")
    with redlease.Lock(one, "b-c", ttl=5):
        pass
    run = scripting(one.connection_pool)
    assert run.functions and run.verified
    alice = _user(server, "alice")
    alice.execute_command("FUNCTION", "DELETE", scripts.LIBRARY_NAME)
    alice.execute_command("FUNCTION", "LOAD", EVIL.replace(scripts.LIBRARY_NAME, "squatter", 1))
    alice.close()
    run.checked -= policy.RECHECK
    first = redlease.Lock(one, "b-leader", ttl=30).acquire(blocking=False)
    with pytest.raises(LockContention):
        redlease.Lock(two, "b-leader", ttl=30).acquire(blocking=False)
    assert first.fencing_token > 0 and not run.functions
    one.close()
    two.close()


def test_scripting_checks_before_fcall_and_again_after_recheck() -> None:
    """The pure rule, on a clock of our own: check, load where none is, FCALL while verified,
    check again after RECHECK seconds; other code under our name means EVALSHA for good."""
    now = [100.0]
    run = policy.Scripting(clock=lambda: now[0])
    call = requests.Call(scripts.STATUS, ("k",), ())
    assert run.command(call) == policy.LIBRARY_CHECK
    load = ("FUNCTION", "LOAD", "REPLACE", scripts.LIBRARY)
    assert run.recover(call, policy.LIBRARY_CHECK, []) == (load,)  # none loaded
    assert run.recover(call, load, scripts.LIBRARY_NAME.encode()) == (call.fcall(),)
    assert run.recover(call, call.fcall(), [b"reply"]) == ()
    now[0] += policy.RECHECK - 0.1
    assert run.command(call) == call.fcall() and run.settled
    now[0] += 0.1
    assert run.command(call) == policy.LIBRARY_CHECK and not run.settled
    busy = redis.ResponseError("BUSY Redis is busy running a script")
    assert run.recover(call, policy.LIBRARY_CHECK, busy) == ()  # it stands; checked again
    assert run.command(call) == policy.LIBRARY_CHECK
    evil = [{b"library_name": scripts.LIBRARY_NAME.encode(), b"library_code": EVIL.encode()}]
    assert run.recover(call, policy.LIBRARY_CHECK, evil) == (call.evalsha(),)
    now[0] += 3600
    assert run.command(call) == call.evalsha() and run.settled
