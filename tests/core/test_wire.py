"""wire.pack sends what redis-py itself would send, or lets redis-py pack."""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.asyncio
import redis.connection
from redis.exceptions import DataError

from redlease.core import wire

ARGS: list[tuple[Any, ...]] = [
    ("FCALL", "redlease_x_acquire", 2, "redlease:{caf\u00e9}", "k", "tok", 10000, 0.25, 1e20),
    ("BLPOP", "a", b"\xff\x00raw", 3.001),
    ("EVALSHA", "d25c27b26bb08ed1f3332796c00c68cb9585dcee", 0, -1, ""),
]


def _connections(**kwargs: Any) -> list[Any]:
    return [
        redis.connection.Connection(**kwargs),
        redis.asyncio.connection.Connection(**kwargs),
    ]


@pytest.mark.parametrize("args", ARGS)
def test_the_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    for conn in _connections():
        assert b"".join(wire.pack(conn, args)) == b"".join(conn.pack_command(*args))


def test_another_encoding_is_left_to_redis_py() -> None:
    args = ("SET", "caf\u00e9", "\u00e9")
    for conn in _connections(encoding="latin-1"):
        packed = b"".join(wire.pack(conn, args))
        assert packed == b"".join(conn.pack_command(*args))
    # redis.asyncio honours the encoding (the blocking client's hiredis packer does not)
    assert b"caf\xe9" in b"".join(wire.pack(_connections(encoding="latin-1")[1], args))


def test_a_bad_argument_gets_redis_pys_error() -> None:
    for conn in _connections():
        with pytest.raises(DataError):
            wire.pack(conn, ("SET", "k", True))
