"""The operator end to end: kopf against KMock over HTTP, real redis-server processes."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path
from typing import Any

import kmock
import pytest
import redis
import yaml

from redlease import Lock, Semaphore
from redlease.core.keys import LockKeys
from redlease.core.quorum import NodeSet
from redlease.core.times import parse_time
from redlease.devtools.kubeemulator import NAMESPACE, Cluster, events, until
from redlease.devtools.localredis import RedisServer
from redlease.kube.names import FORCE_RELEASE_ANNOTATION
from redlease.operator.handlers import FINALIZER

CRD = Path(__file__).resolve().parents[2] / "crds" / "distributedlock.yaml"


def one_node(server: RedisServer, key: str = "job") -> dict[str, Any]:
    return {"keys": [key], "nodes": [{"url": server.url}], "ttlSeconds": 15}


def reasons(cluster: Cluster) -> list[str]:
    return [str(e.get("reason")) for e in events(cluster.api, NAMESPACE)]


def event_with(cluster: Cluster, reason: str) -> dict[str, Any] | None:
    for e in events(cluster.api, NAMESPACE):
        if e.get("reason") == reason:
            return e
    return None


def jsonpath(obj: Any, path: str) -> Any:
    """The simple ``.a.b`` JSONPaths that printer columns use."""
    for part in path.strip(".").split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


async def test_new_lock_is_free(cluster: Cluster, redis_server: RedisServer) -> None:
    await cluster.create("free", one_node(redis_server))
    phase = await until(lambda: cluster.status("free").get("phase"), what="a phase")
    status = cluster.status("free")
    assert phase == "Free"
    assert status["nodes"] == "1/1"
    assert status["healthyNodes"] == status["totalNodes"] == status["quorum"] == 1
    assert "holder" not in status and "fencingToken" not in status
    assert status["observedGeneration"] == 1
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"Valid": "True", "Available": "True", "Held": "False"}


async def test_holder_shows_held_and_printer_columns(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    client = redis_server.client()
    lock = Lock(client, "job", ttl=20, identity="pod-a")
    lease = lock.acquire()
    try:
        await cluster.create("held", one_node(redis_server))
        await until(lambda: cluster.status("held").get("phase") == "Held", what="Held")
        status = cluster.status("held")
        assert status["holder"] == "pod-a"
        assert status["fencingToken"] == lease.fencing_token
        expires = parse_time(status["expiresAt"])
        assert expires is not None and time.time() + 5 < expires <= time.time() + 21
        assert status["transitions"] >= 1 and status["lastTransitionTime"]
        await until(lambda: event_with(cluster, "HolderChanged"), what="HolderChanged")
        assert "pod-a" in str(event_with(cluster, "HolderChanged"))

        # The printer columns, evaluated on the object the operator really wrote.
        crd = yaml.safe_load(CRD.read_text())
        columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        body = cluster.api.objects["redlease.dev/v1alpha1/distributedlocks", NAMESPACE, "held"].raw
        row = {c["name"]: jsonpath(body, c["jsonPath"]) for c in columns}
        assert row == {
            "Keys": "job",
            "Holders": body["spec"].get("holders"),  # the API server defaults it to 1
            "Holder": "pod-a",
            "Token": lease.fencing_token,
            "TTL": 15,
            "Nodes": "1/1",
            "Phase": "Held",
            "Age": body["metadata"]["creationTimestamp"],
            "Paused": body["spec"].get("paused"),
            "Expires": status["expiresAt"],
            "Node Set": f"127.0.0.1:{redis_server.port}",
        }
        types = {"string": str, "integer": int, "date": str, "boolean": bool}
        for c in columns:
            assert row[c["name"]] is None or isinstance(row[c["name"]], types[c["type"]]), c

        lock.release()
        await until(lambda: cluster.status("held").get("phase") == "Free", what="Free again")
        assert "holder" not in cluster.status("held")
        await until(lambda: event_with(cluster, "Released"), what="Released event")
    finally:
        client.close()


def mark(client: redis.Redis) -> None:
    """Mark a node as intact for its running server (the quorum flows' marker)."""
    client.hset("redlease:node", "run_id", client.info("server")["run_id"])


def condition(cluster: Cluster, name: str, kind: str) -> str:
    found = [c for c in cluster.status(name).get("conditions", ()) if c["type"] == kind]
    return str(found[0]["message"]) if found else ""


@pytest.mark.parametrize("redis_nodes", [3], indirect=True)
async def test_killed_node_degrades_and_recovers(
    cluster: Cluster, redis_nodes: list[RedisServer]
) -> None:
    # A RedLock holder: the same lease (identity and fencing token) on every node.
    clients = [s.client() for s in redis_nodes]
    Lock(NodeSet(clients), "quorum-job", ttl=30, identity="leader-1").acquire()
    spec = {"keys": ["quorum-job"], "nodes": [{"url": s.url} for s in redis_nodes]}
    await cluster.create("q", spec)
    await until(lambda: cluster.status("q").get("phase") == "Held", what="Held on 3 nodes")
    assert cluster.status("q")["nodes"] == "3/3" and cluster.status("q")["quorum"] == 2

    victim = redis_nodes[1]
    victim.kill()
    await until(lambda: cluster.status("q").get("phase") == "Degraded", what="Degraded")
    status = cluster.status("q")
    assert status["nodes"] == "2/3"
    assert status["unhealthyNodes"] == [victim.address]
    assert status["holder"] == "leader-1"  # a quorum still names the holder
    lost = await until(lambda: event_with(cluster, "NodeLost"), what="NodeLost event")
    assert lost["type"] == "Warning" and victim.address in lost["message"]

    victim.start()  # back, empty (no persistence): 2 of 3 still agree on the holder...

    def named() -> bool:
        why = condition(cluster, "q", "Available")
        return cluster.status("q").get("nodes") == "2/3" and "restarted without its data" in why

    await until(named, what="named as not counting")
    assert cluster.status("q")["holder"] == "leader-1"
    assert cluster.status("q")["unhealthyNodes"] == [victim.address]
    mark(clients[1])  # ...and it counts again once re-seeded and marked by a lock operation
    await until(lambda: cluster.status("q").get("phase") == "Held", what="Held again")
    assert "unhealthyNodes" not in cluster.status("q")
    await until(lambda: event_with(cluster, "NodeRecovered"), what="NodeRecovered event")

    redis_nodes[0].kill()
    redis_nodes[2].kill()
    await until(lambda: cluster.status("q").get("phase") == "Unavailable", what="Unavailable")
    assert cluster.status("q")["nodes"] == "1/3"
    await until(lambda: event_with(cluster, "QuorumLost"), what="QuorumLost event")
    for c in clients:
        c.close()


async def test_invalid_spec_names_the_field(cluster: Cluster, redis_server: RedisServer) -> None:
    # The CRD's CEL rule rejects this on a real API server; the emulator lets it through.
    spec = {**one_node(redis_server), "ttlSeconds": 10, "renewDeadlineSeconds": 12}
    await cluster.create("bad", spec)
    await until(lambda: cluster.status("bad").get("phase") == "Invalid", what="Invalid")
    cond = next(c for c in cluster.status("bad")["conditions"] if c["type"] == "Valid")
    assert cond["status"] == "False" and "spec.renewDeadlineSeconds" in cond["message"]
    warning = await until(lambda: event_with(cluster, "InvalidSpec"), what="InvalidSpec event")
    assert warning["type"] == "Warning" and "spec.renewDeadlineSeconds" in warning["message"]

    # Fixing the spec brings the lock back, and observedGeneration follows.
    await cluster.patch("bad", {"spec": {"renewDeadlineSeconds": 5}})
    await until(lambda: cluster.status("bad").get("phase") == "Free", what="Free after fix")
    assert cluster.status("bad")["observedGeneration"] == 2
    assert reasons(cluster).count("InvalidSpec") == 1


async def test_force_release(cluster: Cluster, redis_server: RedisServer) -> None:
    client = redis_server.client()
    try:
        first = Lock(client, "stuck", ttl=60, identity="wedged-pod").acquire()
        await cluster.create("stuck", one_node(redis_server, "stuck"))
        await until(lambda: cluster.status("stuck").get("holder") == "wedged-pod", what="Held")
        await cluster.patch(
            "stuck", {"metadata": {"annotations": {FORCE_RELEASE_ANNOTATION: "incident-42"}}}
        )
        await until(lambda: cluster.status("stuck").get("phase") == "Free", what="released")
        warning = await until(lambda: event_with(cluster, "ForceReleased"), what="event")
        assert warning["type"] == "Warning"
        assert "incident-42" in warning["message"] and "wedged-pod" in warning["message"]
        meta = cluster.api.objects["redlease.dev/v1alpha1/distributedlocks", NAMESPACE, "stuck"]
        await until(
            lambda: FORCE_RELEASE_ANNOTATION not in (meta.raw["metadata"].get("annotations") or {}),
            what="annotation cleared",
        )
        keys = LockKeys.for_name("stuck")
        assert client.exists(keys.lease) == 0
        assert int(client.get(keys.fence) or 0) == first.fencing_token  # fence kept
        second = Lock(client, "stuck", ttl=5, identity="new-pod").acquire()
        assert second.fencing_token > first.fencing_token
        # Acted on once: the new holder is not kicked out by a stale annotation.
        cycles = cluster.runtime.refresher.cycles
        await until(lambda: cluster.runtime.refresher.cycles >= cycles + 3, what="3 cycles")
        assert cluster.status("stuck").get("holder") == "new-pod"
        assert reasons(cluster).count("ForceReleased") == 1
    finally:
        client.close()


async def test_semaphore_holders_in_status_column_and_force_release(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    client = redis_server.client()
    try:
        a = Semaphore(client, "pool", limit=2, ttl=60, identity="worker-a").acquire()
        b = Semaphore(client, "pool", limit=2, ttl=60, identity="worker-b").acquire()
        await cluster.create("pool", {**one_node(redis_server, "pool"), "holders": 2})

        def both() -> list[Any] | None:
            holders = cluster.status("pool").get("holders") or []
            return holders if len(holders) == 2 else None

        holders = await until(both, what="both holders in status")
        assert [(h["holder"], h["fencingToken"]) for h in holders] == [
            ("worker-a", a.fencing_token),
            ("worker-b", b.fencing_token),
        ]
        for h in holders:
            expires = parse_time(h["expiresAt"])
            assert expires is not None and time.time() + 5 < expires <= time.time() + 61
        status = cluster.status("pool")
        assert status["phase"] == "Held" and status["holder"] == "worker-a"  # the lowest slot

        # kubectl get distributedlocks: the HOLDERS column shows N
        crd = yaml.safe_load(CRD.read_text())
        columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        body = cluster.api.objects["redlease.dev/v1alpha1/distributedlocks", NAMESPACE, "pool"].raw
        row = {c["name"]: jsonpath(body, c["jsonPath"]) for c in columns}
        assert (row["Holders"], row["Holder"], row["Token"]) == (2, "worker-a", a.fencing_token)

        # force-release frees every slot, the fence counter kept
        await cluster.patch(
            "pool", {"metadata": {"annotations": {FORCE_RELEASE_ANNOTATION: "drain-pool"}}}
        )
        await until(lambda: cluster.status("pool").get("phase") == "Free", what="released")
        assert "holders" not in cluster.status("pool")
        keys = LockKeys.for_name("pool")
        assert client.exists(*keys.slots(2)) == 0
        assert int(client.get(keys.fence) or 0) == b.fencing_token
        warning = await until(lambda: event_with(cluster, "ForceReleased"), what="event")
        assert "drain-pool" in warning["message"] and "worker-a, worker-b" in warning["message"]
        assert "(2 lease records)" in warning["message"]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("name", "over"),
    [("zero", {"holders": 0}), ("too-many", {"holders": 65}), ("word", {"holders": "two"}),
     ("two-keys", {"holders": 2, "keys": ["pool-a", "pool-b"]})],
)  # fmt: skip
async def test_invalid_holders_names_the_field(
    cluster: Cluster, redis_server: RedisServer, name: str, over: dict[str, Any]
) -> None:
    await cluster.create(name, {**one_node(redis_server), **over})
    await until(lambda: cluster.status(name).get("phase") == "Invalid", what="Invalid")
    cond = next(c for c in cluster.status(name)["conditions"] if c["type"] == "Valid")
    assert cond["status"] == "False" and "spec.holders" in cond["message"]
    warning = await until(lambda: event_with(cluster, "InvalidSpec"), what="InvalidSpec event")
    assert warning["type"] == "Warning" and "spec.holders" in warning["message"]


async def test_delete_leaves_redis_alone(cluster: Cluster, redis_server: RedisServer) -> None:
    client = redis_server.client()
    try:
        lease = Lock(client, "keep", ttl=60, identity="runner").acquire()
        await cluster.create("keep", one_node(redis_server, "keep"))
        await until(lambda: cluster.status("keep").get("phase") == "Held", what="Held")
        meta = cluster.api.objects["redlease.dev/v1alpha1/distributedlocks", NAMESPACE, "keep"]
        assert FINALIZER in meta.raw["metadata"]["finalizers"]
        await cluster.delete("keep")
        key = ("redlease.dev/v1alpha1/distributedlocks", NAMESPACE, "keep")
        await until(lambda: cluster.api.objects[key].deleted, what="the object to go")
        keys = LockKeys.for_name("keep")
        state = Lock(client, "keep").state()
        assert state.holder == "runner" and state.fencing_token == lease.fencing_token
        assert int(client.get(keys.fence) or 0) == lease.fencing_token
    finally:
        client.close()


async def test_status_written_only_on_change(cluster: Cluster, redis_server: RedisServer) -> None:
    await cluster.create("quiet", one_node(redis_server, "quiet"))
    await until(lambda: cluster.status("quiet").get("phase") == "Free", what="Free")

    def status_writes() -> int:
        return sum(
            1
            for r in list(cluster.api._requests)
            if r.action == kmock.action.UPDATE and r.name == "quiet" and r.subresource == "status"
        )

    before = status_writes()
    cycles = cluster.runtime.refresher.cycles
    await until(lambda: cluster.runtime.refresher.cycles >= cycles + 5, what="5 more cycles")
    assert status_writes() == before


async def test_secret_credentials(cluster: Cluster) -> None:
    server = RedisServer(password="s3cret-pw").start()
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        await cluster.create_secret(
            "redis-auth", {"password": base64.b64encode(b"s3cret-pw").decode()}
        )
        spec = {
            "keys": ["auth-job"],
            "nodes": [{"url": url}],
            "auth": {"secretRef": {"name": "redis-auth"}},
        }
        await cluster.create("auth", spec)
        await until(lambda: cluster.status("auth").get("phase") == "Free", what="Free with auth")

        spec_missing = {**spec, "auth": {"secretRef": {"name": "nope"}}}
        await cluster.create("noauth", spec_missing)
        await until(lambda: cluster.status("noauth").get("phase") == "Invalid", what="Invalid")
        cond = next(c for c in cluster.status("noauth")["conditions"] if c["type"] == "Valid")
        assert "spec.auth.secretRef.name" in cond["message"]
        assert "s3cret" not in str(cluster.api.objects.items())  # never leaked into objects
    finally:
        server.stop()


async def test_no_confused_deputy_for_secrets(cluster: Cluster) -> None:
    """A DistributedLock writer points a lock at a server they run and at a Secret of the
    namespace: the operator sends nothing unless the Secret opted in, and never to a node the
    Secret does not allow."""
    received = bytearray()

    async def listener(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(4096):
            received.extend(data)
            writer.write(b"-ERR nope\r\n")  # whatever it is, refuse it
        writer.close()

    trap = await asyncio.start_server(listener, "127.0.0.1", 0)
    port = trap.sockets[0].getsockname()[1]
    try:
        secret = base64.b64encode(b"db-admin-password").decode()
        await cluster.create_secret("app-db", {"password": secret}, consent=False)
        await cluster.create_secret(
            "redis-only", {"password": secret},
            annotations={"redlease.dev/allowed-nodes": "redis-0.redis:6379"},
        )  # fmt: skip
        await cluster.create_secret(
            "tls-only", {"password": secret},
            annotations={"redlease.dev/allowed-nodes": f"rediss://127.0.0.1:{port}"},
        )  # fmt: skip
        await cluster.create_secret(
            "sentinel-good", {"password": secret},
            annotations={"redlease.dev/allowed-nodes": "sentinel:mymaster, redis+sentinel://good/mymaster"},
        )  # fmt: skip
        trap_node = [{"url": f"redis://127.0.0.1:{port}/0"}]
        trap_sentinel = [{"url": f"redis+sentinel://127.0.0.1:{port}/mymaster"}]
        for name, nodes, ref in (
            ("steal", trap_node, "app-db"),
            ("steal2", trap_node, "redis-only"),
            ("steal3", trap_node, "tls-only"),  # allowed as rediss:// only: no downgrade
            ("steal4", trap_sentinel, "sentinel-good"),  # the service name alone is not enough
        ):
            spec = {"keys": [name], "nodes": nodes, "auth": {"secretRef": {"name": ref}}}
            await cluster.create(name, spec)
        for name, field, words in (
            ("steal", "spec.auth.secretRef.name", "redlease.dev/credentials=true"),
            ("steal2", "spec.nodes", "redlease.dev/allowed-nodes"),
            ("steal3", "spec.nodes", f"redis://127.0.0.1:{port}/0"),
            ("steal4", "spec.nodes", f"redis+sentinel://127.0.0.1:{port}/mymaster"),
        ):
            await until(lambda n=name: cluster.status(n).get("phase") == "Invalid", what=name)  # type: ignore[misc]
            cond = next(c for c in cluster.status(name)["conditions"] if c["type"] == "Valid")
            assert field in cond["message"] and words in cond["message"]
        await until(
            lambda: (
                [e.get("reason") for e in events(cluster.api, NAMESPACE)].count("InvalidSpec") >= 4
            ),
            what="four InvalidSpec events (kopf posts them in the background)",
        )
        assert b"db-admin-password" not in received and b"AUTH" not in received
        assert b"HELLO" not in received and b"SENTINEL" not in received.upper()
    finally:
        trap.close()


async def test_redis_cluster_lock(cluster: Cluster, redis_cluster: Any) -> None:
    client = redis_cluster.client()
    try:
        Lock(client, "clustered", ttl=30, identity="c-holder").acquire()
        nodes = [{"url": f"redis://{h}:{p}"} for h, p in redis_cluster.startup_nodes]
        await cluster.create("clu", {"keys": ["clustered"], "nodes": nodes, "cluster": True})
        await until(lambda: cluster.status("clu").get("phase") == "Held", what="Held")
        assert cluster.status("clu")["holder"] == "c-holder"
        assert cluster.status("clu")["nodes"] == "1/1"
    finally:
        client.close()


_ = redis  # the redis package is what the library clients above are built on


async def test_one_bad_lock_fails_only_itself(cluster: Cluster, redis_server: RedisServer) -> None:
    """Locks whose specs the CRD schema lets through but that cannot be used (URL options of
    the wrong name, type or scheme -- redis-py raised TypeError/ValueError for some while
    building the client, which failed every lock's refresh --, a Sentinel URL whose database
    is not a number, a missing Secret, broken TLS material) and locks on hostile nodes
    (one answers garbage, one never answers) share refresh cycles with a good lock: each bad
    one gets its own phase naming the problem, the good one keeps following its holder."""
    garbage = b"*2\r\n*1\r\n$-1\r\n%1\r\n+x\r\n:7\r\n"  # nested, a RESP3 map, an unexpected int

    async def answers_garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(4096):
            writer.write(garbage)
        writer.close()

    async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.read(4096):
            pass
        writer.close()

    hostile = [await asyncio.start_server(fn, "127.0.0.1", 0)
               for fn in (answers_garbage, never_answers)]  # fmt: skip
    client = redis_server.client()
    try:
        first = Lock(client, "good", ttl=60, identity="first")
        first.acquire()
        await cluster.create("good", one_node(redis_server, "good"))
        await until(lambda: cluster.status("good").get("holder") == "first", what="Held")
        pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n"
                               b"-----END CERTIFICATE-----\n").decode()  # fmt: skip
        await cluster.create_secret("broken-ca", {"ca.crt": pem})
        node = f"127.0.0.1:{redis_server.port}"
        unusable = ("Invalid", "Valid")  # the phase, and the condition that names the problem
        unreachable = ("Unavailable", "Available")
        bad: dict[str, tuple[dict[str, Any], tuple[str, str], str]] = {
            "option": ({"nodes": [{"url": f"redis://{node}/0?foo=bar"}]}, unusable,
                       "spec.nodes[0].url: unknown URL option 'foo'"),
            "typed": ({"nodes": [{"url": f"redis://{node}/0?socket_timeout=abc"}]}, unusable,
                      "spec.nodes[0].url: URL option socket_timeout='abc'"),
            "tlsoption": ({"nodes": [{"url": f"redis://{node}/0?ssl_ca_certs=/etc/hosts"}]},
                          unusable, "'ssl_ca_certs' applies to rediss:// URLs only"),
            "unixoption": ({"nodes": [{"url": "unix:///tmp/r.sock?socket_keepalive=true"}]},
                           unusable, "'socket_keepalive' does not apply to unix://"),
            "sentineldb": ({"nodes": [{"url": f"redis+sentinel://{node}/svc/x"}]}, unusable,
                           "sentinel URL path is /SERVICE or /SERVICE/DB"),
            "nosecret": ({"auth": {"secretRef": {"name": "absent"}}}, unusable,
                         "spec.auth.secretRef.name: cannot read Secret apps/absent"),
            "badtls": ({"nodes": [{"url": f"rediss://{node}/0"}],
                        "tls": {"caSecretRef": {"name": "broken-ca"}}}, unreachable,
                       f"unreachable: {node}"),
        }  # fmt: skip
        for i, server in enumerate(hostile):
            port = server.sockets[0].getsockname()[1]
            bad[f"hostile{i}"] = ({"nodes": [{"url": f"redis://127.0.0.1:{port}/0"}]},
                                  unreachable, f"unreachable: 127.0.0.1:{port}")  # fmt: skip
        for name, (spec, _, _) in bad.items():
            await cluster.create(name, {**one_node(redis_server, name), **spec})
        for name, (_, (phase, kind), words) in bad.items():
            await until(lambda n=name, p=phase: cluster.status(n).get("phase") == p, what=name)  # type: ignore[misc]
            cond = next(c for c in cluster.status(name)["conditions"] if c["type"] == kind)
            assert cond["status"] == "False" and words in cond["message"], (name, cond)
        # the good lock still follows its holder, cycle after cycle
        cycles = cluster.runtime.refresher.cycles
        first.release()
        Lock(client, "good", ttl=60, identity="second").acquire()
        await until(lambda: cluster.status("good").get("holder") == "second", what="new holder")
        await until(lambda: cluster.runtime.refresher.cycles >= cycles + 3, what="3 more cycles")
        assert cluster.status("good")["phase"] == "Held"
    finally:
        client.close()
        for server in hostile:
            server.close()


async def test_unknown_fields_condition_and_one_warning(
    cluster: Cluster, redis_server: RedisServer
) -> None:
    # A real API server prunes undeclared fields; the emulator keeps them, as a non-pruning
    # path would. The lock still works (its sidecars use the fields they know) and says so.
    node = {"url": redis_server.url, "pasword": "hunter2"}
    spec = {"keys": ["typo"], "nodes": [node], "ttlSecond": 30, "pasued": True}
    await cluster.create("typo", spec)
    await until(lambda: condition(cluster, "typo", "UnknownFields"), what="UnknownFields")
    status = cluster.status("typo")
    assert status["phase"] == "Free"
    message = condition(cluster, "typo", "UnknownFields")
    for part in ("spec.ttlSecond: unknown field (did you mean ttlSeconds?)",
                 "spec.pasued: unknown field (did you mean paused?)",
                 "spec.nodes[0].pasword: unknown field"):  # fmt: skip
        assert part in message, message
    warning = await until(lambda: event_with(cluster, "UnknownFields"), what="the Warning")
    assert warning["type"] == "Warning" and "did you mean ttlSeconds?" in warning["message"]
    assert "hunter2" not in message + warning["message"]  # a misplaced field may be a secret

    fixed = {"ttlSecond": None, "pasued": None, "ttlSeconds": 30, "nodes": [{"url": node["url"]}]}
    await cluster.patch("typo", {"spec": fixed})
    await until(lambda: not condition(cluster, "typo", "UnknownFields"), what="condition gone")
    assert cluster.status("typo")["observedGeneration"] == 2
    assert reasons(cluster).count("UnknownFields") == 1  # once per change, not per refresh
