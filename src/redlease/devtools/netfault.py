"""A loopback TCP proxy that adds latency or cuts a node off, for real fault injection in the
tests and the chaos runs (next to :mod:`redlease.devtools.localredis`).

Runs its own asyncio loop in a thread. ``delay`` seconds are added to every chunk in both
directions (order kept); ``cut()`` drops every connection and refuses new ones until
``restore()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time


class DelayProxy:
    def __init__(self, target_port: int, delay: float = 0.0) -> None:
        self.target_port = target_port
        self.delay = delay
        self.port = 0
        self._cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def start(self) -> DelayProxy:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_w))
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()

        task = asyncio.ensure_future(forward())
        try:
            while True:
                data = await reader.read(65536)
                queue.put_nowait((time.monotonic() + self.delay, data))
                if not data:
                    break
            await task
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            task.cancel()
            with contextlib.suppress(Exception):
                writer.close()

    def cut(self) -> None:
        def drop() -> None:
            self._cut = True
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()

        self._loop.call_soon_threadsafe(drop)

    def restore(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self, "_cut", False)

    def stop(self) -> None:
        async def shutdown() -> None:
            self.cut()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        self._thread.join(5)


def half_open(port: int, n: int, data: bytes = b"", timeout: float = 30) -> list[socket.socket]:
    """``n`` connections to a loopback ``port`` that send ``data`` (b"": nothing, e.g. no TLS
    ClientHello; else an unfinished request) and then wait: a slowloris flood."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if data:
            with contextlib.suppress(OSError):  # the server may already have evicted it
                s.sendall(data)
        socks.append(s)
    return socks


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (reads without blocking)."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
