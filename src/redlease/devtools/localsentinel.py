"""A local Sentinel-managed master for the tests and the chaos runs: a master, its replicas and
its Sentinels, on loopback :class:`~redlease.devtools.localredis.RedisServer` processes; it can
fail the master over and say which server the Sentinels name."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from redlease.devtools.localredis import RedisServer, Started, free_port, replication, until
from redlease.devtools.redisbinary import PortTaken, ServerError, find_redis_server

if TYPE_CHECKING:
    from redlease.devtools.netfault import DelayProxy


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


@dataclass
class SentinelDeployment(Started):
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
            until(deadline, "Sentinel replicas in sync", self._in_sync)
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
            until(
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
        if int(replication(self.master).get("connected_slaves", 0)) != self.replicas:
            return False
        return all(replication(r).get("master_link_status") == "up" for r in self.replica_servers)

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
            if replication(server).get("role") != "master":
                return False
            found.append(server)
            return True

        until(deadline, f"a failover away from port {old.port}", promoted)
        return found[-1]

    def stop(self) -> None:
        for server in [*self.sentinel_servers, *self.replica_servers]:
            server.stop()
        if self.master is not None:
            self.master.stop()
        for link in self.links:
            link.stop()


__all__ = ["SentinelDeployment", "SentinelServer"]
