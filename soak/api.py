"""The soak's Kubernetes API: KMock (the tests' emulator) in a process of its own.

``python soak/api.py PORT`` serves until SIGTERM/SIGINT and prints ``ready`` once it
listens. In its own process the emulator's work (every status patch, watch event and Event of
the operator) cannot slow down the soak's driver, which times the failovers.

KMock keeps every request and matches each new one against that whole log, once per declared
reaction, so its cost per request grows with the log (in a 5-minute soak it stalled for a
minute and a half): the log is cut to its last :data:`KEEP` requests every :data:`TRIM`
seconds. With 500 kept, the RedLock set's part (more status writes during its outages, and its
``--lock-ref`` sidecars reading their Namespace on each) took KMock to a whole core and 2-10 s
per answer. Nothing here reads the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]

import kmock  # noqa: E402

from redlease.devtools.kubeemulator import Emulator, declare  # noqa: E402

KEEP = 100  # requests kept in KMock's log (a request being served is among the last few)
TRIM = 0.25  # s between two cuts


async def serve(port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Emulator() as api, kmock.Server(api, port=port):
        declare(api)
        print("ready", flush=True)
        while not stop.is_set():
            del api._requests[:-KEEP]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TRIM)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID`: where it is busy
    asyncio.run(serve(int(sys.argv[1])))
