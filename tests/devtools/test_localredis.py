"""The local server runner is sound with several test processes at once: a port taken between
choosing it and binding it is never mistaken for our server."""

from __future__ import annotations

import subprocess
import sys

import pytest

from redlease.devtools import localredis, localsentinel
from redlease.devtools.localredis import RedisServer
from redlease.devtools.localsentinel import SentinelDeployment
from redlease.devtools.redisbinary import PortTaken


def test_a_taken_port_is_detected_and_an_automatic_one_replaced() -> None:
    with RedisServer() as other:
        chosen = RedisServer()
        chosen.port = other.port  # as if another process bound "our" free port first
        try:
            chosen.start()
            assert chosen.port != other.port and chosen.client().ping()
            assert chosen.client().info("server")["process_id"] == chosen.proc.pid  # type: ignore[union-attr]
        finally:
            chosen.stop()
        fixed = RedisServer(port=other.port)  # a port the caller asked for is not changed
        try:
            with pytest.raises(PortTaken):
                fixed.start()
        finally:
            fixed.stop()


def test_a_port_claimed_by_another_live_process_is_never_handed_out() -> None:
    """Two xdist workers asking the kernel for a free port at once may get the same one; the
    claim file keeps the second off it while the first lives (the CI failure: a Sentinel's
    chosen port answered with another worker's server)."""
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from redlease.devtools.localredis import free_port;"
         "print(free_port(), flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert not localredis._reserve(port)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    # the claimer is gone (its exit hook removed the claim): the port can be claimed again
    assert localredis._reserve(port)
    assert not localredis._reserve(port)  # ... once


def test_a_sentinel_group_is_started_again_when_one_of_its_ports_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with RedisServer() as other:
        real = localredis.free_port
        handed: list[int] = []  # the taken port, once handed out

        def first_taken(*, with_bus: bool = False) -> int:
            # the first port picked for a Sentinel is already served by someone else's server
            frame = sys._getframe(1)
            callers = (
                frame.f_locals.get("self"),
                frame.f_back and frame.f_back.f_locals.get("self"),
            )
            if any(isinstance(c, SentinelDeployment) for c in callers) and not handed:
                handed.append(other.port)
                return other.port
            return real(with_bus=with_bus)

        monkeypatch.setattr(localsentinel, "free_port", first_taken)  # where the group picks ports
        with SentinelDeployment(replicas=1) as d:
            monkeypatch.setattr(localsentinel, "free_port", real)
            ports = [s.port for s in d.sentinel_servers]
            assert handed == [other.port]
            assert other.port not in ports and len(ports) == 3
            assert d.master_port() == d.master.port  # type: ignore[union-attr]


def test_free_ports_are_outside_the_kernels_ephemeral_range() -> None:
    """A port the kernel may hand to an outgoing connection can be taken between its choice
    and the server's bind (an operator's metrics port was refused under load): none is."""
    ephemeral = localredis._ephemeral()
    for _ in range(50):
        assert localredis.free_port() not in ephemeral
        port = localredis.free_port(with_bus=True)
        assert port not in ephemeral and port + 10000 not in ephemeral and port + 10000 <= 65535
