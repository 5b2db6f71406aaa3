"""A TCP proxy that adds latency (or cuts the link) between clients and one Redis node.

Runs its own asyncio loop in a daemon thread. ``delay`` applies to every chunk in both
directions; ``cut()`` drops every connection and refuses new ones until ``heal()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading


class DelayProxy:
    def __init__(self, target_port: int, delay: float = 0.0) -> None:
        self.target_port = target_port
        self.delay = delay
        self.cut_off = False
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port: int = s.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if self.delay:
                    await asyncio.sleep(self.delay)
                if self.cut_off:
                    break
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_w))
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))
        self._writers.difference_update((writer, up_w))

    def cut(self) -> None:
        self.cut_off = True

        def close_all() -> None:
            for w in list(self._writers):
                w.close()

        self._loop.call_soon_threadsafe(close_all)

    def heal(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
