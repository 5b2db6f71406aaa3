"""Credentials go only to nodes their owner consents to: consent names carry the scheme, the
host and the effective port (every Sentinel and the service), and a master a Sentinel names is
checked before a byte is sent to it.

The attackers are small asyncio servers on loopback that record what they receive."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from redlease.core.client import MasterRefused
from redlease.core.connect import Target, connect_target
from redlease.core.urls import Consent, check_consent
from redlease.devtools.localredis import RedisServer
from redlease.errors import ConfigError

PASSWORD = "s3cret-consent-pw"


@pytest.mark.parametrize(
    ("allowed", "url", "ok"),
    [
        ("rediss://r0:6379", "rediss://r0:6379/0", True),
        ("rediss://r0:6379", "redis://r0:6379/0", False),  # no downgrade to plain text
        ("r0:6379", "rediss://r0:6379", True),  # bare host:port: TLS only
        ("r0:6379", "redis://r0:6379", False),
        ("redis://R0.example", "redis://r0.example:6379/2?socket_timeout=3", True),
        ("redis://r0:6379", "redis://r0:6380", False),
        ("redis://r0:6379", "redis://r0.:6379", False),
        ("redis://[::1]:7000", "redis://[::1]:7000", True),
        ("unix:/run/redis.sock", "unix:///run/redis.sock", True),
        ("unix:///run/redis.sock", "unix:///run/other.sock", False),
        ("redis+sentinel://s1:26379,s2:26379/m", "redis+sentinel://s1:26379,s2/m", True),
        ("redis+sentinel://s1:26379,s2:26379/m, redis://x:1", "redis+sentinel://s2/m", True),
        ("redis+sentinel://s1:26379,s2:26379/m", "redis+sentinel://evil:26379/m", False),
        ("redis+sentinel://s1:26379,s2:26379/m", "redis+sentinel://s1,evil:26379/m", False),
        ("redis+sentinel://s1:26379/m", "redis+sentinel://s1:26379/other", False),
        ("redis+sentinel://s1:26379/m", "rediss+sentinel://s1:26379/m", False),
        ("sentinel:m, s1:26379", "redis+sentinel://s1:26379/m", False),  # names no Sentinel
    ],
)
def test_consent_names_carry_scheme_host_and_port(allowed: str, url: str, ok: bool) -> None:
    consent = Consent.parse(allowed, "allowed")
    assert (consent.refused([url]) == []) is ok


def test_a_sentinel_named_master_is_allowed_with_the_scheme_it_is_reached_by() -> None:
    consent = Consent.parse("redis://10.0.0.5:6379, rediss://10.0.0.6:6379, rediss://[::1]:7", "a")
    assert consent.allows_master("redis+sentinel", "10.0.0.5", 6379)
    assert not consent.allows_master("rediss+sentinel", "10.0.0.5", 6379)
    assert consent.allows_master("rediss+sentinel", "10.0.0.6", 6379)
    assert not consent.allows_master("redis+sentinel", "10.0.0.6", 6379)  # no downgrade
    assert consent.allows_master("rediss+sentinel", "::1", 7)


def test_refusal_names_the_refused_url_never_the_allowed_ones() -> None:
    consent = Consent.parse("rediss://redis.prod:6379, redis://secret-host:6379", "allowed")
    with pytest.raises(ConfigError) as err:
        check_consent(consent, ["redis://redis.prod:6379/0"])
    text = str(err.value)
    assert err.value.field == "spec.nodes" and "redis://redis.prod:6379/0" in text
    assert "secret-host" not in text and "TLS only (rediss://)" in text


@pytest.mark.parametrize(
    "entry", ["redis://h:0", "ftp://h:1", "redis://u:pw@h:1", "redis://h/?port=1"]
)
def test_a_bad_allowed_entry_is_one_clear_error(entry: str) -> None:
    with pytest.raises(ConfigError) as err:
        Consent.parse(f"redis://ok:6379,{entry}", "allowed")
    assert err.value.field == "allowed" and "pw" not in str(err.value)


# --- a fake Sentinel and a fake master on loopback ---------------------------------------------


Reply = Callable[[list[bytes], bool], bytes]  # (command, RESP3?) -> answer


@dataclass
class Recorder:
    """A RESP server on loopback: records every byte, answers each command with ``reply``
    (in RESP3 once the client said ``HELLO 3``, as redis-py does by default)."""

    reply: Reply
    received: bytearray = field(default_factory=bytearray)
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        resp3 = False
        try:
            while (command := await _read_command(reader, self.received)) is not None:
                if command[:2] and command[0].lower() == b"hello":
                    resp3 = command[1:2] == [b"3"]
                    writer.write(_hello(resp3))
                else:
                    writer.write(self.reply(command, resp3))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _read_command(reader: asyncio.StreamReader, log: bytearray) -> list[bytes] | None:
    line = await reader.readline()
    log.extend(line)
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.split()
    parts = []
    for _ in range(int(line[1:])):
        head = await reader.readline()
        body = await reader.readexactly(int(head[1:]) + 2)
        log.extend(head + body)
        parts.append(body[:-2])
    return parts


def _bulk(*items: str) -> bytes:
    return f"*{len(items)}\r\n".encode() + b"".join(
        f"${len(i.encode())}\r\n{i}\r\n".encode() for i in items
    )


def _map(resp3: bool, *pairs: tuple[str, str]) -> bytes:
    flat = [x for pair in pairs for x in pair]
    if not resp3:
        return _bulk(*flat)
    return f"%{len(pairs)}\r\n".encode() + _bulk(*flat)[len(f"*{len(flat)}\r\n") :]


def _hello(resp3: bool) -> bytes:
    """The answer to ``HELLO``: redis-py checks ``proto`` is the integer it asked for."""
    head = b"%2\r\n" if resp3 else b"*4\r\n"
    return (
        head
        + b"$6\r\nserver\r\n$4\r\nfake\r\n$5\r\nproto\r\n"
        + (b":3\r\n" if resp3 else b":2\r\n")
    )


def sentinel_naming(master_port: int) -> Reply:
    """A Sentinel that says the master of ``mymaster`` is 127.0.0.1:``master_port``."""

    def reply(command: list[bytes], resp3: bool) -> bytes:
        words = [c.lower() for c in command[:2]]
        if words == [b"sentinel", b"masters"]:
            state = _map(resp3, ("name", "mymaster"), ("ip", "127.0.0.1"),
                         ("port", str(master_port)), ("flags", "master"),
                         ("num-other-sentinels", "0"), ("quorum", "1"))  # fmt: skip
            return b"*1\r\n" + state
        if words == [b"sentinel", b"get-master-addr-by-name"]:
            return _bulk("127.0.0.1", str(master_port))
        if words[:1] == [b"ping"]:
            return b"+PONG\r\n"
        return b"+OK\r\n"

    return reply


@asynccontextmanager
async def listening(recorder: Recorder) -> AsyncIterator[Recorder]:
    server = await asyncio.start_server(recorder.serve, "127.0.0.1", 0)
    recorder.port = server.sockets[0].getsockname()[1]
    try:
        yield recorder
    finally:
        server.close()


def refuse(_: list[bytes], __: bool) -> bytes:
    return b"-ERR nope\r\n"


async def _ping(target: Target, *, asyncio_client: bool) -> object:
    if asyncio_client:
        client = connect_target(target, asyncio=True, socket_timeout=5.0)
        try:
            return await client.ping()
        finally:
            await client.aclose()

    def blocking() -> object:
        client = connect_target(target, socket_timeout=5.0)
        try:
            return client.ping()
        finally:
            client.close()

    return await asyncio.to_thread(blocking)


@pytest.mark.parametrize("asyncio_client", [True, False], ids=["asyncio", "blocking"])
async def test_a_master_the_sentinel_names_is_checked_before_auth(asyncio_client: bool) -> None:
    """The Sentinel is allowed, the master it names is not: the master receives nothing, and
    the error names the refused master."""
    async with (
        listening(Recorder(refuse)) as master,
        listening(Recorder(sentinel_naming(master.port))) as sentinel,
    ):
        url = f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster"
        consent = Consent.parse(f"{url}, redis://127.0.0.1:1", "allowed")
        target = Target((url,), password=PASSWORD, consent=consent)
        with pytest.raises(MasterRefused) as err:
            await _ping(target, asyncio_client=asyncio_client)
        assert f"redis://127.0.0.1:{master.port}" in str(err.value)
        assert "mymaster" in str(err.value) and PASSWORD not in str(err.value)
        assert b"sentinel" in sentinel.received.lower()  # it was asked
        assert PASSWORD.encode() not in sentinel.received
    assert master.received == b""


@pytest.mark.parametrize("asyncio_client", [True, False], ids=["asyncio", "blocking"])
async def test_an_allowed_master_gets_the_credentials(asyncio_client: bool) -> None:
    """A real redis-server with a password, named by the fake Sentinel and allowed."""
    server = RedisServer(password=PASSWORD).start()
    try:
        async with listening(Recorder(sentinel_naming(server.port))) as sentinel:
            url = f"redis+sentinel://127.0.0.1:{sentinel.port}/mymaster"
            allowed = f"{url},redis://127.0.0.1:{server.port}"
            target = Target((url,), password=PASSWORD, consent=Consent.parse(allowed, "a"))
            assert await _ping(target, asyncio_client=asyncio_client) is True
            assert PASSWORD.encode() not in sentinel.received
    finally:
        server.stop()


async def test_a_url_the_consent_does_not_cover_is_refused_before_connecting() -> None:
    async with listening(Recorder(refuse)) as trap:
        url = f"redis://127.0.0.1:{trap.port}/0"
        target = Target((url,), password=PASSWORD, consent=Consent.parse(f"rediss{url[5:]}", "a"))
        with pytest.raises(ConfigError) as err:
            await _ping(target, asyncio_client=True)
        assert err.value.field == "spec.nodes"
    assert trap.received == b""


@pytest.mark.parametrize(
    "option",
    ["port=7777", "host=evil", "path=/tmp/s", "ssl_cert_reqs=none", "ssl_check_hostname=0"],
)
def test_a_url_option_cannot_move_the_node_or_weaken_tls(option: str) -> None:
    """The consent name says where the node is: no query option may change that (nor how TLS
    is verified), in a DistributedLock as on the command line."""
    from redlease.kube.spec import parse_spec

    url = f"rediss://redis.prod/?{option}"
    with pytest.raises(ConfigError) as err:
        parse_spec({"keys": ["k"], "nodes": [{"url": url}]})
    assert err.value.field.startswith("spec.nodes") and repr(option.split("=")[0]) in str(err.value)
