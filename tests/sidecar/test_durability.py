"""A sidecar on a single Redis that keeps no data across a restart says so once, at start-up;
one on a durable node (AOF, fsync always) says nothing."""

from __future__ import annotations

import pytest

from redlease.core.durability import restart_loss
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, wait_until

WARNING = "does not keep leases across a restart"


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"appendonly": "yes", "appendfsync": "always", "save": ""}, None),
        ({"appendonly": "yes", "appendfsync": "everysec", "save": ""}, "AOF without"),
        ({"appendonly": "no", "appendfsync": "everysec", "save": "3600 1"}, "snapshots only"),
        ({"appendonly": "no", "appendfsync": "everysec", "save": ""}, "no persistence"),
        ({}, None),  # CONFIG refused (ACL, managed Redis): cannot tell, no alarm
    ],
)
def test_what_a_restart_loses(config: dict[str, str], says: str | None) -> None:
    loss = restart_loss(config)
    assert (loss is None) if says is None else (loss is not None and says in loss)


@pytest.mark.parametrize("persistent", [False, True], ids=["no-persistence", "aof-always"])
def test_start_up_warning_only_for_a_node_that_forgets(persistent: bool) -> None:
    server = RedisServer(persistent=persistent).start()
    sidecar = Sidecar("a", "durable-check", [server.url]).start()
    try:
        sidecar.wait_up()
        wait_until(lambda: "persistence checked" in sidecar.log())
        log = sidecar.log()
        if persistent:
            assert WARNING not in log
        else:
            assert log.count(WARNING) == 1
            assert "no persistence" in log and "appendfsync always" in log
            assert server.address in log
    finally:
        sidecar.stop()
        server.stop()
