"""A command as bytes: hiredis's packer wherever it gives the bytes redis-py would send.

``redis.asyncio`` packs in pure Python (about 30 us for a 15-argument FCALL on the 2-core
bench machine, a tenth of an uncontended pair) and the blocking client wraps hiredis in a
generator pass (about 5 us); ``hiredis.pack_command`` itself takes about 1.5 us. The bytes are
the same when the client encodes text as strict UTF-8 (redis-py's default; hiredis encodes
``str`` as UTF-8 and numbers as redis-py does). Another encoding, a command name with a space in
it, or an argument hiredis refuses goes through the connection's own packer, which also raises
redis-py's error for a bad argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a dependency (redis[hiredis])
    _hiredis_pack = None

_UTF8 = frozenset({"utf-8", "utf8", "UTF-8", "UTF8"})


def pack(conn: Any, args: tuple[Any, ...]) -> list[bytes]:
    """``args`` packed for ``conn`` (a blocking or asyncio redis-py connection)."""
    enc = getattr(conn, "encoder", None)
    if (
        _hiredis_pack is not None
        and enc is not None
        and enc.encoding in _UTF8
        and enc.encoding_errors == "strict"
        and isinstance(args[0], str)
        and " " not in args[0]
    ):
        try:
            return [_hiredis_pack(args)]
        except TypeError:
            pass
    return list(conn.pack_command(*args))
