"""Local ``redis-server`` processes for the demo, the tests, the benchmarks and the chaos runs.

Finds a server binary, starts servers on free loopback ports and can kill (SIGKILL), pause
(SIGSTOP), resume and restart them; a Redis Cluster of them is :mod:`.localcluster`, a
Sentinel-managed master :mod:`.localsentinel`. Every process started here is stopped at
interpreter exit.

Which binary a :class:`RedisServer` runs by default, and the server flavours of the test matrix,
is :mod:`.redisbinary` (:func:`~redlease.devtools.redisbinary.find_redis_server`); whether it
can serve TLS, :mod:`.tlsprobe`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import redis

from redlease.devtools.redisbinary import (
    PortTaken,
    ServerError,
    find_redis_server,
)

_STARTED: list[RedisServer] = []
_LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [.*#-] ")

_PORTS = Path(tempfile.gettempdir()) / "redlease-test-ports"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reserve(port: int) -> bool:
    """Claim ``port`` for this process among every process on the machine that uses
    :func:`free_port` (pytest-xdist workers, a demo beside a test run).

    The kernel hands a port it just gave one process to the next ``bind(("", 0))`` of another
    as soon as the first lets go of it, so two workers could pick the same port before either
    server binds it, and a server stopped for a restart test could find its port taken. A
    claim is a file named after the port holding the claimer's pid; it holds while that
    process lives (a dead claimer's file is taken over)."""
    _PORTS.mkdir(parents=True, exist_ok=True)
    path = _PORTS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                owner = int(path.read_text() or "0")
            except (OSError, ValueError):
                return False
            if owner == os.getpid():
                return False  # ours already: not free for another of our servers
            if owner and _pid_alive(owner):
                return False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        _CLAIMED.append(path)
        return True
    return False


_CLAIMED: list[Path] = []


_FLOOR = 10000  # ports below are left to the machine's own services
_BUS = 10000  # a cluster node's bus port is its port + 10000
_RESERVED = {6379, 6379 + _BUS}  # never a developer's own Redis


def _ephemeral() -> range:
    """The kernel's range of ports for outgoing connections (Linux's default if unreadable)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def _usable(port: int, with_bus: bool, ephemeral: range) -> bool:
    ports = (port, port + _BUS) if with_bus else (port,)
    return all(p <= 65535 and p not in ephemeral and p not in _RESERVED for p in ports)


def _bindable(port: int) -> bool:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def free_port(*, with_bus: bool = False) -> int:
    """A free TCP port on 127.0.0.1 (and port + 10000 free too when ``with_bus``), claimed
    for this process so that no other process using this function picks it too.

    Chosen outside the kernel's ephemeral range: a port from ``bind(("", 0))`` is one the
    kernel also gives to outgoing connections, and one of the hundreds a test run opens took
    a chosen port before its server bound it (an operator's port refused, seen under load)."""
    ephemeral = _ephemeral()
    candidates = [p for p in range(_FLOOR, 65536) if _usable(p, with_bus, ephemeral)] or list(
        range(_FLOOR, 65536 - (_BUS if with_bus else 0))
    )
    for _ in range(200):
        port = random.choice(candidates)
        if not _bindable(port) or (with_bus and not _bindable(port + _BUS)):
            continue
        if not _reserve(port) or (with_bus and not _reserve(port + _BUS)):
            continue
        return port
    raise ServerError("no free port found")


@atexit.register
def _release_ports() -> None:
    for path in _CLAIMED:
        with contextlib.suppress(OSError):
            if path.read_text() == str(os.getpid()):
                path.unlink()


def die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook so that a server dies with the process that started it, even when that
    process is SIGKILLed or SIGTERMed and its atexit hook never runs (Linux only).

    The kernel ties this to the starting *thread*, so it is only used from the main thread.
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a throwaway CA and a server certificate for 127.0.0.1 / localhost."""

    ca: str
    cert: str
    key: str

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        """Issue them into ``directory`` (needs the ``trustme`` package, a test dependency)."""
        import trustme

        ca = trustme.CA()
        issued = ca.issue_cert("127.0.0.1", "localhost")
        files = cls(*(str(directory / f"{k}.pem") for k in ("ca", "cert", "key")))
        ca.cert_pem.write_to_path(files.ca)
        issued.cert_chain_pems[0].write_to_path(files.cert)
        issued.private_key_pem.write_to_path(files.key)
        return files


class Started:
    """``with deployment:`` starts it and stops it at the end (servers, clusters, Sentinels)."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class RedisServer(Started):
    """One redis-server process on 127.0.0.1. Not persistent unless ``persistent=True``."""

    port: int = 0
    extra_args: Sequence[str] = ()
    password: str | None = None
    persistent: bool = False
    cluster: bool = False
    tls: TlsFiles | None = None  # also serve TLS on ``tls_port`` with these files
    binary: str = field(default_factory=find_redis_server)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="redlease-redis-")))
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    tls_port: int = 0
    env: Mapping[str, str] = field(default_factory=dict)  # added to the server's environment

    def __post_init__(self) -> None:
        self._auto_port = not self.port  # chosen here: another may be chosen if it is taken
        if not self.port:
            self.port = free_port(with_bus=self.cluster)
        if self.tls is not None and not self.tls_port:
            self.tls_port = free_port()

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.workdir),
            "--logfile", str(self.workdir / "redis.log"),
            "--daemonize", "no",
            "--protected-mode", "no",
        ]  # fmt: skip
        if self.persistent:
            args += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
        else:
            args += ["--appendonly", "no", "--save", ""]
        if self.password:
            args += ["--requirepass", self.password]
        if self.tls is not None:
            args += [
                "--tls-port", str(self.tls_port),
                "--tls-cert-file", self.tls.cert,
                "--tls-key-file", self.tls.key,
                "--tls-ca-cert-file", self.tls.ca,
                "--tls-auth-clients", "no",
            ]  # fmt: skip
        if self.cluster:
            args += [
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(self.workdir / "nodes.conf"),
                "--cluster-node-timeout", "2000",
            ]  # fmt: skip
        return args + list(self.extra_args)

    def start(self, timeout: float = 10.0) -> RedisServer:
        if self.proc is not None and self.proc.poll() is None:
            return self
        first = self not in _STARTED
        for attempt in range(5):
            # the console gets what the server says before its logfile is open (bad options)
            with open(self.workdir / "console.log", "ab") as console:
                self.proc = subprocess.Popen(
                    self.args(), stdout=console, stderr=subprocess.STDOUT,
                    start_new_session=True, preexec_fn=die_with_parent(),
                    env={**os.environ, **self.env} if self.env else None,
                )  # fmt: skip
            if self not in _STARTED:
                _STARTED.append(self)
            try:
                self.wait_ready(timeout)
                return self
            except PortTaken:
                # a free port was taken between our check and the server's bind (several test
                # processes at once): pick another one, on the first start only
                self.kill()
                if not (first and self._auto_port) or attempt == 4:
                    raise
                self.port = free_port(with_bus=self.cluster)
                if self.tls is not None:
                    self.tls_port = free_port()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        client = self.client(socket_timeout=1.0)
        try:
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    why = self.failure()
                    error = PortTaken if self._bind_failed() else ServerError
                    raise error(f"{self.binary} on port {self.port} exited: {why}")
                try:
                    if client.ping():
                        # ours, not another test process's server on the same port
                        if (
                            self.proc is None
                            or client.info("server").get("process_id") == self.proc.pid
                        ):
                            return
                        raise PortTaken(f"port {self.port} is served by another process")
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerError(f"redis-server on {self.port} did not answer PING")
                time.sleep(0.01)
        finally:
            client.close()

    def _logs(self) -> str:
        """What the server wrote: its console (before its logfile is open), then its logfile."""
        text = ""
        for name in ("console.log", "redis.log"):
            with contextlib.suppress(OSError):
                text += (self.workdir / name).read_text(errors="replace")
        return text

    def _bind_failed(self) -> bool:
        """Whether the server stopped because it could not bind its port (anywhere in its logs:
        the last line is "Failed listening on port ...", the cause is a line before it)."""
        text = self._logs()
        return "already in use" in text or "Failed listening on port" in text

    def failure(self) -> str:
        """One line saying why the server stopped: the option it refused, or its last words."""
        text = self._logs()
        # drop the log prefix ``pid:role date time level`` of every line
        lines = [_LOG_PREFIX.sub("", line).strip() for line in text.splitlines() if line.strip()]
        for i, line in enumerate(lines):
            if line.startswith(">>>"):  # *** FATAL CONFIG FILE ERROR ***, then the bad line
                why = lines[i + 1] if i + 1 < len(lines) else "refused"
                return f"{why}: {line[3:].strip()}"
        return lines[-1] if lines else "no output"

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **kwargs)  # type: ignore[arg-type]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the server (a crash: nothing is flushed)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets but answers nothing."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self, timeout: float = 10.0) -> RedisServer:
        """Kill and start again on the same port (empty unless ``persistent``)."""
        self.kill()
        return self.start(timeout)

    def wipe(self) -> None:
        """Delete the server's data files (AOF, RDB; kill it first): its next start is empty,
        as a node that lost its disk."""
        for item in ("appendonlydir", "appendonly.aof", "dump.rdb"):
            path = self.workdir / item
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def stop(self) -> None:
        self.kill()
        if self in _STARTED:
            _STARTED.remove(self)
        shutil.rmtree(self.workdir, ignore_errors=True)


def command(server: RedisServer, *args: Any) -> Any:
    """One command on a short-lived client of ``server`` (replies decoded)."""
    client = server.client(socket_timeout=2.0, decode_responses=True)
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def until(deadline: float, what: str, check: Callable[[], bool]) -> None:
    """Poll ``check`` until it holds (Redis errors count as "not yet"); ServerError at the end."""
    while True:
        with contextlib.suppress(redis.RedisError, KeyError):
            if check():
                return
        if time.monotonic() > deadline:
            raise ServerError(f"timed out waiting for {what}")
        time.sleep(0.02)


def replication(server: RedisServer) -> dict[str, str]:
    client = server.client(socket_timeout=2.0, decode_responses=True)
    try:
        return {str(k): str(v) for k, v in client.info("replication").items()}
    finally:
        client.close()


@atexit.register
def _stop_all() -> None:
    for server in list(_STARTED):
        server.stop()
