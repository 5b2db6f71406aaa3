"""A local Redis Cluster for the tests, the benchmarks and the chaos runs: ``masters`` primaries
with ``replicas`` replicas each, on loopback :class:`~redlease.devtools.localredis.RedisServer`
processes, assembled with plain ``CLUSTER ADDSLOTS``/``CLUSTER MEET`` (no ``redis-cli``); it
can fail a slot's master over and say who serves a key."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import redis

from redlease.devtools.localredis import RedisServer, Started, command, replication, until
from redlease.devtools.redisbinary import ServerError


@dataclass
class LocalCluster(Started):
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
            command(server, "CLUSTER", "ADDSLOTS", *range(lo, hi + 1))
        # Distinct config epochs before the nodes meet, as `redis-cli --cluster create` does.
        # Left at 0, the masters settle their collision by bumping epochs over the next
        # seconds; a TAKEOVER in that window can lose its slots back to its old master.
        for epoch, server in enumerate(self.everyone, start=1):
            command(server, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
        first = self.servers[0]
        for server in self.everyone[1:]:
            command(server, "CLUSTER", "MEET", "127.0.0.1", first.port)
        known = f"cluster_known_nodes:{len(self.everyone)}"
        until(deadline, "every node knows every other", lambda: self._info_has(known))
        # Every node knows the highest epoch, so a takeover's bump is above every node's.
        current = f"cluster_current_epoch:{len(self.everyone)}\r"
        until(deadline, "every node knows the current epoch", lambda: self._info_has(current))
        for i, replica in enumerate(self.replica_servers):
            master = self.servers[i % self.masters]
            command(replica, "CLUSTER", "REPLICATE", command(master, "CLUSTER", "MYID"))
        until(deadline, "cluster_state:ok", lambda: self._info_has("cluster_state:ok"))
        until(deadline, "replicas in sync", self._replicas_in_sync)
        return self

    @property
    def everyone(self) -> list[RedisServer]:
        """Every server: the first masters, then the replicas."""
        return [*self.servers, *self.replica_servers]

    def _info_has(self, text: str) -> bool:
        return all(text in str(command(s, "CLUSTER", "INFO")) for s in self.everyone if s.alive)

    def _replicas_in_sync(self) -> bool:
        return all(replication(r).get("master_link_status") == "up" for r in self.replica_servers)

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
                for lo, hi, master, *_ in command(server, "CLUSTER", "SLOTS"):
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
                    for lo, hi, master, *_ in command(server, "CLUSTER", "SLOTS"):
                        if int(lo) <= slot <= int(hi):
                            ports.add(int(master[1]))
            if len(ports) != 1 or old.port in ports:
                return False
            new = next(s for s in self.everyone if s.port in ports)
            if replication(new).get("role") != "master":
                return False
            found.append(new)
            return self._info_has("cluster_state:ok")

        try:
            until(time.monotonic() + timeout, f"a failover away from port {old.port}", promoted)
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
                    for lo, hi, master, *_ in command(server, "CLUSTER", "SLOTS")
                    if int(lo) <= slot <= int(hi)
                ]
                state = command(server, "CLUSTER", "INFO").split()[0]
                role = replication(server).get("role")
                parts.append(f"{server.port}: {role}, slot {slot} at {masters}, {state}")
            except redis.RedisError as exc:
                parts.append(f"{server.port}: {exc}")
        return "; ".join(parts)

    def wait_synced(self, master: RedisServer, timeout: float = 10.0) -> None:
        """Wait until every replica of ``master`` has everything it wrote so far (replication
        is asynchronous: what a replica lacks when its master dies is lost)."""

        def synced() -> bool:
            info = command(master, "INFO", "replication")  # slaveN: {"offset": ...}
            offset = int(info["master_repl_offset"])
            replicas = [v for k, v in info.items() if k.startswith("slave") and "offset" in v]
            return bool(replicas) and all(int(r["offset"]) >= offset for r in replicas)

        until(time.monotonic() + timeout, f"the replicas of {master.address} in sync", synced)

    def replica_of(self, master: RedisServer, timeout: float = 30.0) -> RedisServer:
        """A live replica of ``master``, waited for up to ``timeout`` s: on a busy machine a
        replica late with its pings is flagged failing for a while (node timeout) and seen
        again once it answers."""
        found: list[RedisServer] = []

        def live() -> bool:
            myid = str(command(master, "CLUSTER", "MYID"))
            for line in str(command(master, "CLUSTER", "NODES")).splitlines():
                fields = line.split()
                if len(fields) > 3 and fields[3] == myid and "fail" not in fields[2]:
                    port = int(fields[1].split("@")[0].rpartition(":")[2])
                    found.append(next(s for s in self.everyone if s.port == port))
                    return True
            return False

        until(time.monotonic() + timeout, f"a live replica of {master.address}", live)
        return found[-1]

    def takeover(self, replica: RedisServer) -> None:
        """``CLUSTER FAILOVER TAKEOVER`` on ``replica``: it becomes master at once, without
        the agreement of its master or of the other masters (a deterministic failover)."""
        command(replica, "CLUSTER", "FAILOVER", "TAKEOVER")

    def stop(self) -> None:
        for s in self.everyone:
            s.stop()


__all__ = ["LocalCluster"]
