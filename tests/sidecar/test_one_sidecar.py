"""One sidecar per state directory and per identity: a second one on the same ``--state-dir``
refuses to start; a second one with a leader's ``--identity`` says it cannot lead and why
(docs/sidecar.md). Real sidecar processes on a real redis-server."""

from __future__ import annotations

import json
from collections.abc import Callable

from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import Sidecar, wait_until


def test_a_second_sidecar_on_the_same_state_dir_refuses_to_start(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """The leader's marker and state file stay its own; the standby exits 2 with one line.
    Before: the second ran, removed the leader's marker and wrote ``leader: false`` over its
    state file. Once the first process is gone (killed: the kernel drops the lock) the
    directory can be used again."""
    leader = sidecars("a", lock_name, [redis_server.url]).wait_up()
    wait_until(leader.is_leader, timeout=15)
    marker = leader.state_dir / "leader"
    wait_until(marker.exists)

    second = sidecars("b", lock_name, [redis_server.url], state_dir=leader.state_dir)
    assert second.wait(timeout=30) == 2
    refusals = [line for line in second.log().splitlines() if "in use by another sidecar" in line]
    assert len(refusals) == 1, second.log()
    assert "--state-dir" in refusals[0] and str(leader.proc.pid) in refusals[0]  # type: ignore[union-attr]
    assert marker.read_text().split()[1] == "a"
    assert json.loads(leader.state_file.read_text())["leader"] is True

    leader.stop()  # SIGKILL
    again = sidecars("c", lock_name, [redis_server.url], state_dir=leader.state_dir).wait_up()
    wait_until(again.is_leader, timeout=30)


def test_a_second_sidecar_with_a_leaders_identity_reports_the_conflict(
    redis_server: RedisServer, sidecars: Callable[..., Sidecar], lock_name: str
) -> None:
    """The twin shows ``conflict`` in ``/status`` and ``GET /`` (``holder`` and ``name`` stay
    empty: an app comparing them to its own name must not think it leads) and logs it once.
    Before: ``holder: null``, ``{"name": ""}`` and nothing logged."""
    leader = sidecars("a", lock_name, [redis_server.url]).wait_up()
    wait_until(leader.is_leader, timeout=15)
    twin = sidecars("a", lock_name, [redis_server.url]).wait_up()

    doc = wait_until(lambda: (d := twin.status()) and d.get("conflict") and d, timeout=15)
    assert doc["leader"] is False and doc["holder"] is None
    assert "'a'" in doc["conflict"] and "another process" in doc["conflict"]
    code, root = twin.get("/")
    assert code == 200 and root["name"] == "" and root["conflict"] == doc["conflict"]
    own = leader.status()
    assert own is not None and own["leader"] is True and own["conflict"] is None
    code, root = leader.get("/")
    assert root == {"name": "a"}

    seen = {doc["renewed_at"]}  # the leader renews every 0.1 s: each new value is a new read

    def more_reads() -> bool:
        now = twin.status()
        assert now is not None and now["conflict"] is not None
        seen.add(now["renewed_at"])
        return len(seen) > 5

    wait_until(more_reads, timeout=30)
    logged = [line for line in twin.log().splitlines() if "identity held by another" in line]
    assert len(logged) == 1, logged
