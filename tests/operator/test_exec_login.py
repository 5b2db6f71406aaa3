"""A real `redlease operator` process logged in through a kubeconfig whose user is an exec plugin
(as EKS, GKE and AKS kubeconfigs are), against an API server that accepts only unexpired tokens
the plugin issued: it keeps working across the expiry of its tokens, kopf (watches, Events) and
its own API client (status patches, Secret reads) alike. Its log, kopf's lines included, is
JSON lines, one format for every command.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from redlease import Lock
from redlease.devtools.execplugin import ExecPlugin
from redlease.devtools.kubeemulator import Cluster, until
from redlease.devtools.localredis import RedisServer
from redlease.devtools.operatorprocess import faulty_api, start_operator

LIFETIME = 6.0  # seconds a token is good for (loaded again at half of it)


def spec(server: RedisServer, key: str) -> dict[str, object]:
    return {"keys": [key], "nodes": [{"url": server.url}], "ttlSeconds": 60}


@pytest.mark.timeout(180)
async def test_the_operator_keeps_working_across_token_expiry(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    plugin = ExecPlugin(tmp_path / "plugin", LIFETIME)
    async with faulty_api() as (emulator, proxy):
        emulator.tokens = plugin.accepts
        config = plugin.kubeconfig(tmp_path / "kubeconfig", proxy.url)
        operator = await start_operator(proxy.url, tmp_path, config=config)
        try:
            cluster = Cluster(emulator, None, proxy.url)  # type: ignore[arg-type]
            await operator.listing(emulator)
            await cluster.create("before", spec(redis_server, "before"))
            await until(lambda: phase(cluster, "before") == "Free", what="before: Free")

            # past the expiry of every token issued so far
            last = max(expires for _, expires in plugin.issued())
            await until(lambda: time.time() > last + 1, timeout=30, what="the tokens expired")
            proxy.reset()  # kopf's watches reconnect: with a token that is good now
            await cluster.create("after", spec(redis_server, "after"))
            await until(lambda: phase(cluster, "after") == "Free", timeout=60, what="after")
            Lock(redis_server.client(), "before", ttl=60, identity="pod-b").acquire()
            await until(lambda: holder(cluster, "before") == "pod-b", timeout=60, what="Held")
            assert operator.proc.returncode is None, operator.text()
            # the first token expired before "after" was created: the work since was done with
            # tokens fetched later
            assert len(plugin.issued()) >= 2
            print("401 answers:", emulator.unauthorized, "tokens:", len(plugin.issued()))
        finally:
            code = await operator.stop()
    assert code == 0, operator.text()
    lines = [line for line in operator.text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is JSON
    assert any("authentication" in str(r.get("event")) for r in records), lines  # kopf's
    assert not any(token in operator.text() for token, _ in plugin.issued())


def phase(cluster: Cluster, name: str) -> object:
    return cluster.status(name).get("phase")


def holder(cluster: Cluster, name: str) -> object:
    return cluster.status(name).get("holder")
