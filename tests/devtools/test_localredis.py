"""The local server runner is sound with several test processes at once: a port taken between
choosing it and binding it is never mistaken for our server."""

from __future__ import annotations

import pytest

from redlease.devtools.localredis import PortTaken, RedisServer


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
