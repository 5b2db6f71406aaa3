"""The probe-only listener (``--probes``) in a process of its own.

The kubelet's probes must not wait for the sidecar's main event loop: a flood of the lock API
(1,000 blocking acquires and 256 stalled bodies reopened as fast as they are evicted) keeps that
loop busy with over a thousand connections a second, and a probe served there waited for its
turn: p99 246-415 ms (docs/lockapi.md, "Limits"). A thread of its own is not enough: it needs
the interpreter's lock (the GIL) for every step of a request, and on a busy machine the main
loop's thread is often preempted while it holds that lock (measured: p99 75-173 ms, against 8-17
ms from a process of its own). So the sidecar forks, before its event loop starts, a small
process that serves ``/healthz`` and ``/readyz`` (:func:`probes_app`) behind its own guard
(:func:`redlease.serving.httpguard.serve`, :data:`PROBE_CAP` connections) and answers from a
:class:`Verdict` the main loop sends it over a pipe. It shares no lock with the main loop.

The verdict stays honest because it carries its own expiry (monotonic instants: one clock for
every process of the machine):

* the main loop sends it every :data:`BEAT` seconds and at once after a change of state
  (:meth:`ProbeProcess.poke`); a verdict holds for at most ``stall`` seconds
  (:data:`LOOP_STALL`) after it was made. A main loop that stops making progress stops
  sending, so within ``stall`` the probes answer 500 / 503: a wedged sidecar fails its
  liveness probe (before, it failed by timing out), a merely busy one does not;
* each part also holds only as long as the main loop's own state says: healthy until the
  election loop's current step is overdue (``Elector.healthy_until``), and a readiness that
  rests on leadership only until the term's local deadline, so no probe answer claims
  leadership after the renew deadline, however late the next verdict comes.

The process ends when the main process closes the pipe (its wind-down is over, or it died:
the kernel closes the pipe then); it ignores SIGINT and SIGTERM, so the probes keep answering
during a drain. It is a fork of the sidecar: it shares the sidecar's memory pages until either
writes them (about 13 MB of its own) and is as undumpable as the sidecar.
"""

from __future__ import annotations

import asyncio
import math
import os
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog
from aiohttp import web

from redlease.serving.httpguard import serve as guarded
from redlease.sidecar.web import MAX_REQUEST, json_errors

log = structlog.get_logger("redlease.sidecar")

BEAT = 0.25  # seconds between two verdicts sent by the main loop
LOOP_STALL = 5.0  # seconds a verdict holds: a main loop silent for longer is wedged
PROBE_CAP = 16  # connections: the kubelet's three probes need a few, never many
START_TIMEOUT = 30.0  # seconds for the probe process to bind its address and say so
CLOSE_TIMEOUT = 5.0  # seconds for the probe process to end once the pipe is closed
NEVER = -math.inf
_RECORD = struct.Struct("=dd")  # one verdict on the pipe: healthy_until, ready_until


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the probes answer, as monotonic instants: healthy (``/healthz`` 200) strictly
    before ``healthy_until``, ready (``/readyz`` 200) strictly before ``ready_until``;
    :data:`NEVER` for "not now", ``math.inf`` for "until further notice"."""

    healthy_until: float = NEVER
    ready_until: float = NEVER

    def within(self, horizon: float) -> Verdict:
        """This verdict, holding no later than ``horizon``."""
        return Verdict(min(self.healthy_until, horizon), min(self.ready_until, horizon))


class Judge(Protocol):
    """Where the verdict comes from (the running sidecar, on its main loop)."""

    def verdict(self) -> Verdict: ...


class Board:
    """The latest verdict, as the probe process last received it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.verdict = Verdict()

    def healthy(self) -> bool:
        return self.clock() < self.verdict.healthy_until

    def is_ready(self) -> bool:
        return self.clock() < self.verdict.ready_until


def probes_app(board: Board) -> web.Application:
    """``/healthz`` (200 | 500) and ``/readyz`` (200 | 503) with only their verdict (``{"ok":
    bool}``, ``{"ready": bool}``): what the kubelet needs, nothing about the lock (holder,
    nodes, errors) for whoever else reaches the pod IP. Every answer JSON, like ``--http``'s."""

    async def healthz(_: web.Request) -> web.Response:
        ok = board.healthy()
        return web.json_response({"ok": ok}, status=200 if ok else 500)

    async def readyz(_: web.Request) -> web.Response:
        ok = board.is_ready()
        return web.json_response({"ready": ok}, status=200 if ok else 503)

    app = web.Application(middlewares=[json_errors], client_max_size=MAX_REQUEST)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class Verdicts:
    """Splits the bytes read from the pipe into verdicts (pure): ``feed`` returns the latest
    complete one, if any; a partial record waits for its rest."""

    def __init__(self) -> None:
        self._buffer = b""

    @staticmethod
    def pack(verdict: Verdict) -> bytes:
        """One verdict as it goes down the pipe."""
        return _RECORD.pack(verdict.healthy_until, verdict.ready_until)

    def feed(self, data: bytes) -> Verdict | None:
        self._buffer += data
        whole = len(self._buffer) - len(self._buffer) % _RECORD.size
        if not whole:
            return None
        last = self._buffer[whole - _RECORD.size : whole]
        self._buffer = self._buffer[whole:]
        return Verdict(*_RECORD.unpack(last))


class ProbeProcess:
    """The main process's side: :meth:`start` forks the probe process (before any event loop
    or thread exists), :meth:`beat` sends the judge's verdict from the main loop, :meth:`close`
    ends the process."""

    def __init__(self, pid: int, pipe: int, status: int, stall: float) -> None:
        self.pid = pid
        self.stall = stall
        self._pipe: int | None = pipe  # verdicts to the probe process (non-blocking)
        self._status = status  # the probe process's end closes when it ends
        self._judge: Judge | None = None
        self._beat: asyncio.Task[None] | None = None
        self._soon: asyncio.Handle | None = None

    @classmethod
    def start(cls, host: str, port: int, *, stall: float = LOOP_STALL) -> ProbeProcess:
        """Fork the probe process and wait until it listens on ``host:port``; an ``OSError``
        when it cannot bind the address (the process has ended then)."""
        verdicts_r, verdicts_w = os.pipe()
        status_r, status_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the probe process: never returns
            code = 1
            try:
                os.close(verdicts_w)
                os.close(status_r)
                code = _serve_probes(host, port, verdicts_r, status_w)
            except BaseException:  # noqa: BLE001 - say why, then leave as the probe process
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(verdicts_r)
        os.close(status_w)
        os.set_blocking(verdicts_w, False)
        probes = cls(pid, verdicts_w, status_r, stall)
        answer = probes._read_status()
        if answer.startswith("ok "):
            return probes
        probes.close()
        raise OSError(answer.removeprefix("error ") or "the probe process ended")

    def _read_status(self) -> str:
        line = b""
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([self._status], [], [], START_TIMEOUT)
            chunk = os.read(self._status, 256) if ready else b""
            if not chunk:
                break
            line += chunk
        return line.decode(errors="replace").strip()

    def send(self, verdict: Verdict) -> None:
        """Send ``verdict``, holding at most :attr:`stall` seconds from now."""
        if self._pipe is None:
            return
        horizon = time.monotonic() + self.stall
        record = verdict.within(horizon)
        try:
            os.write(self._pipe, Verdicts.pack(record))
        except BlockingIOError:  # the probe process is not reading: its verdict runs out
            pass
        except OSError as exc:  # it ended: the kubelet's probes are refused now
            log.error("the probe listener's process ended", pid=self.pid, error=str(exc))
            os.close(self._pipe)
            self._pipe = None

    def beat(self, judge: Judge) -> None:
        """Main loop: send ``judge``'s verdict now and every :data:`BEAT` seconds."""
        self._judge = judge
        self._beat = asyncio.create_task(self._beating(), name="redlease-probe-verdict")

    def poke(self) -> None:
        """Main loop: the state changed; send the verdict once the current callback is done
        (the caller may itself be part of working out the verdict)."""
        if self._soon is None and self._beat is not None:
            self._soon = asyncio.get_running_loop().call_soon(self._send_now)

    def _send_now(self) -> None:
        self._soon = None
        if self._judge is not None:
            self.send(self._judge.verdict())

    async def _beating(self) -> None:
        while True:
            self._send_now()
            await asyncio.sleep(BEAT)

    def stop_beat(self) -> None:
        """Main loop: no more verdicts (the last one runs out by itself)."""
        for pending in (self._beat, self._soon):
            if pending is not None:
                pending.cancel()
        self._beat = self._soon = None

    def close(self) -> None:
        """Close the pipe (the probe process closes its port and ends) and reap it; killed
        if it has not ended within :data:`CLOSE_TIMEOUT`."""
        self.stop_beat()
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        ended, _, _ = select.select([self._status], [], [], CLOSE_TIMEOUT)
        if not ended or os.read(self._status, 256):
            os.kill(self.pid, signal.SIGKILL)
        os.close(self._status)
        os.waitpid(self.pid, 0)


def _serve_probes(host: str, port: int, verdicts: int, status: int) -> int:
    """The probe process: serve until the pipe of ``verdicts`` ends; say on ``status`` when
    listening (``ok PORT``) or why not (``error WHY``). Returns the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return asyncio.run(_probes_main(host, port, verdicts, status))


async def _probes_main(host: str, port: int, verdicts: int, status: int) -> int:
    board = Board()
    try:
        server = await guarded(probes_app(board), host, port, cap=PROBE_CAP)
    except OSError as exc:
        os.write(status, f"error {exc.strerror or exc}\n".encode())
        return 2
    os.write(status, f"ok {server.port}\n".encode())  # held open until this process ends
    ended = asyncio.Event()
    split = Verdicts()

    def readable() -> None:
        try:
            data = os.read(verdicts, 4096)
        except BlockingIOError:
            return
        if not data:
            ended.set()
            return
        verdict = split.feed(data)
        if verdict is not None:
            board.verdict = verdict

    os.set_blocking(verdicts, False)
    loop = asyncio.get_running_loop()
    loop.add_reader(verdicts, readable)
    try:
        await ended.wait()
    finally:
        loop.remove_reader(verdicts)
        await server.close()
    return 0
