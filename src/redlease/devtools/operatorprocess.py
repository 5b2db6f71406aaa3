"""API faults for a real `redlease operator` process (docs/operator.md, "API faults").

``FaultyEmulator`` answers watches with 410 Gone (an ERROR event in the stream, or the HTTP
status) and slows down the status patches of chosen locks. ``TcpProxy`` sits between the
operator and KMock and takes the API server away: ``refuse`` closes the listening socket and
resets every open connection, ``blackhole`` keeps connections open but forwards nothing (a
partition: what was in flight is never answered, not even after the recovery).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp.web
import kmock

from redlease.devtools.kubeemulator import NAMESPACE, Emulator, events, kubeconfig, until
from redlease.devtools.localredis import free_port
from redlease.kube.names import PLURAL

GONE = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "Expired",
    "code": 410,
    "message": "too old resource version",
}


def _is_lock(request: kmock.Request) -> bool:
    return request.resource is not None and request.resource.plural == PLURAL


class FaultyEmulator(Emulator):
    """The emulator plus injected faults: ``gone_events`` / ``gone_http`` answer that many
    DistributedLock watches with 410 Gone (in the stream / as the HTTP status); ``slow`` delays
    the answer to status patches of the named locks by that many seconds; ``lost_answers``
    Event POSTs are stored, then their connection is reset before the answer."""

    gone_events = 0
    gone_http = 0
    lost_answers = 0
    lists_at_gone: int | None = None  # DistributedLock lists seen when the last 410 was served
    slow: dict[str, float]

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if (
            self.lost_answers > 0
            and request.action == kmock.action.CREATE
            and request.resource is not None
            and request.resource.plural == "events"
            and request._raw_request is not None
        ):
            response = await super()._handle(request)
            if response.status < 300:  # stored: now lose the answer
                self.lost_answers -= 1
                transport = request._raw_request.transport
                if transport is not None:
                    transport.abort()
            return response
        if _is_lock(request) and request.action == kmock.action.WATCH:
            if self.gone_http > 0:
                self.gone_http -= 1
                self.lists_at_gone = self.lists()
                return aiohttp.web.json_response(GONE, status=410)
            if self.gone_events > 0 and request._raw_request is not None:
                self.gone_events -= 1
                self.lists_at_gone = self.lists()
                response = aiohttp.web.StreamResponse(
                    status=200, headers={"Content-Type": "application/json"}
                )
                await response.prepare(request._raw_request)
                await response.write(json.dumps({"type": "ERROR", "object": GONE}).encode())
                await response.write(b"\n")
                await response.write_eof()
                return response
        delay = getattr(self, "slow", {}).get(str(request.name))
        if delay and _is_lock(request) and request.subresource == "status":
            await asyncio.sleep(delay)  # the fault itself: a slow answer, not synchronisation
        return await super()._handle(request)

    def event_posts(self) -> int:
        """How many times an Event was POSTed (retries included)."""
        return sum(
            1
            for r in list(self._requests)
            if r.action == kmock.action.CREATE
            and r.resource is not None
            and r.resource.plural == "events"
        )

    def relisted_after_gone(self) -> bool:
        """Whether DistributedLocks were listed after the last 410 was served (kopf also lists
        before the watch that is told it is gone, so a count taken earlier proves nothing)."""
        return self.lists_at_gone is not None and self.lists() > self.lists_at_gone

    def lists(self) -> int:
        """How many times DistributedLocks were listed (kopf lists before every new watch)."""
        return sum(1 for r in list(self._requests) if _is_lock(r) and r.action == kmock.action.LIST)


def event_counts(emulator: Emulator) -> Counter[tuple[str, str, str]]:
    """(object name, reason, message) -> how many Events were posted with it."""
    return Counter(
        (str(e.get("involvedObject", {}).get("name")), str(e.get("reason")), str(e.get("message")))
        for e in events(emulator, NAMESPACE)
    )


class TcpProxy:
    """A TCP forwarder to ``target`` on a free loopback port that can fail (see the module)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self.mode: str | None = None  # None (healthy), "refuse" or "blackhole"
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        self._dead: set[asyncio.StreamWriter] = set()  # blackholed: never forward again

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def fail(self, mode: str) -> None:
        """Take the API server away: ``refuse`` or ``blackhole`` (see the module)."""
        self.mode = mode
        if mode == "refuse":
            self.reset()
            if self._server is not None:
                self._server.close()
                self._server = None
        else:
            self._dead |= self._conns

    async def recover(self) -> None:
        self.mode = None
        if self._server is None:
            await self.start()

    def reset(self) -> None:
        """Drop every open connection (the clients see a reset; new ones get through)."""
        for writer in list(self._conns):
            writer.transport.abort()

    async def close(self) -> None:
        self.reset()
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._conns |= {writer, up_writer}
        if self.mode == "blackhole":
            self._dead |= {writer, up_writer}
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, writer),
                self._pipe(up_reader, writer, up_writer),
            )
        finally:
            for w in (writer, up_writer):
                self._conns.discard(w)
                self._dead.discard(w)
                w.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        source: asyncio.StreamWriter,
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if source in self._dead or writer in self._dead:
                    continue  # a partition swallows the bytes
                writer.write(data)
                await writer.drain()
        writer.transport.abort()


@dataclass
class OperatorProcess:
    """A `redlease operator` process and its log file."""

    proc: asyncio.subprocess.Process
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    async def listing(self, emulator: FaultyEmulator) -> None:
        """Wait (60 s at most) until the operator has listed the DistributedLocks (logged in,
        watching); an ``AssertionError`` with its log if it exited instead."""
        await until(
            lambda: emulator.lists() or self.proc.returncode is not None,
            timeout=60,
            what="the operator's first list",
        )
        assert self.proc.returncode is None, self.text()

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode


async def start_operator(
    url: str, tmp: Path, *args: str, refresh: float = 0.3, config: Path | None = None
) -> OperatorProcess:
    """`redlease operator --namespace apps` logged in through a kubeconfig pointing at ``url``
    (a token), or through ``config``."""
    config = config or kubeconfig(tmp / "kubeconfig", url)
    env = {**os.environ, "KUBECONFIG": str(config), "REDLEASE_REFRESH": str(refresh)}
    for name in ("KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE"):
        env.pop(name, None)
    log = tmp / "operator.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "redlease", "operator", "--namespace", NAMESPACE, *args,
            env=env, stdout=out, stderr=out,
        )  # fmt: skip
    return OperatorProcess(proc, log)


@contextlib.asynccontextmanager
async def faulty_api() -> AsyncIterator[tuple[FaultyEmulator, TcpProxy]]:
    """KMock behind a :class:`TcpProxy`; point the operator at ``proxy.url``."""
    from redlease.devtools.kubeemulator import declare

    async with FaultyEmulator() as emulator, kmock.Server(emulator) as server:
        emulator.slow = {}
        declare(emulator)
        proxy = TcpProxy((server.host, server.port))
        await proxy.start()
        try:
            yield emulator, proxy
        finally:
            await proxy.close()
