"""What follows a failed script call is decided once for both single-node drivers
(core/driving.py ``rerouted``), stepped here without I/O: which errors refresh a cluster's slot
map, when a request is sent again and to how many nodes, when it goes through redis-py's routing
and which error is reported. The drivers' own copies of these rules drifted before (issue 38):
a fence below fails if one comes back."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio.cluster as acluster
import redis.exceptions as rex

from redlease.core import client as _redis
from redlease.core import driving, scripts
from redlease.core.requests import Call
from redlease.errors import LockUnavailable

END = 123.0  # the request's deadline: every wait of its re-route is bounded by it


def _call() -> Call:
    return Call(script=scripts.RELEASE, keys=("{k}:lease",), args=())


def _cluster() -> _redis.NodeBase:
    # an asyncio cluster client connects at its first command, not here
    return _redis.NodeBase(acluster.RedisCluster(host="127.0.0.1", port=1), "lock")


def _single() -> _redis.NodeBase:
    return _redis.NodeBase(redis.Redis(host="127.0.0.1", port=1), "lock")


def _run(steps: driving.Steps, results: list[Any]) -> tuple[list[driving.Step], Any]:
    """Feed ``results`` to ``steps`` one per step; the steps seen and the outcome (the reply,
    or the exception raised)."""
    seen: list[driving.Step] = []
    try:
        step = next(steps)
        for result in results:
            seen.append(step)
            step = steps.send(result)
        seen.append(step)
    except StopIteration as stop:
        return seen, stop.value
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return seen, exc
    raise AssertionError(f"more steps than results: {seen}")


def test_a_moved_request_goes_to_the_slot_s_new_node_after_a_refresh() -> None:
    moved = rex.MovedError("1 127.0.0.1:2")
    seen, out = _run(driving.rerouted(_cluster(), _call(), "a", moved, END), [True, "b", "OK"])
    assert seen == [
        driving.Refresh("a", moved, END),
        driving.Locate("{k}:lease", END),
        driving.Send("b"),
    ]
    assert out == "OK"


def test_a_request_that_may_have_run_is_reported_not_sent_again() -> None:
    late = rex.TimeoutError("no reply")
    seen, out = _run(driving.rerouted(_cluster(), _call(), "a", late, END), [True])
    assert seen == [driving.Refresh("a", late, END)]
    assert isinstance(out, LockUnavailable)
    assert out.__cause__ is late


@pytest.mark.parametrize("found", [None, "a"])
def test_no_other_node_for_the_slot_reports_the_error(found: str | None) -> None:
    unsent = _redis.Unsent("refused")
    seen, out = _run(driving.rerouted(_cluster(), _call(), "a", unsent, END), [True, found])
    assert seen == [driving.Refresh("a", unsent, END), driving.Locate("{k}:lease", END)]
    assert isinstance(out, LockUnavailable)


def test_a_map_not_read_in_time_reports_the_error() -> None:
    moved = rex.MovedError("1 127.0.0.1:2")
    seen, out = _run(driving.rerouted(_cluster(), _call(), "a", moved, END), [False])
    assert seen == [driving.Refresh("a", moved, END)]
    assert isinstance(out, LockUnavailable)


def test_a_slot_being_migrated_goes_through_redis_py_routing() -> None:
    seen, out = _run(
        driving.rerouted(_cluster(), _call(), "a", rex.AskError("1 127.0.0.1:2"), END), ["OK"]
    )
    assert seen == [driving.ROUTED]
    assert out == "OK"


def test_a_cluster_request_goes_to_hops_nodes_at_most() -> None:
    moved = rex.MovedError("1 127.0.0.1:2")
    nodes = [acluster.ClusterNode("127.0.0.1", 7000 + i) for i in range(_redis.HOPS + 1)]
    answers: list[Any] = []
    for node in nodes[1:-1]:  # the driver sent the first hop itself
        answers += [True, node, moved]
    answers += [True, nodes[-1]]  # where the slot map puts it after the last hop's MOVED
    seen, out = _run(driving.rerouted(_cluster(), _call(), nodes[0], moved, END), answers)
    sent = [s for s in seen if isinstance(s, driving.Send)]
    assert sent == [driving.Send(n) for n in nodes[1:-1]]
    assert isinstance(out, LockUnavailable)
    assert out.nodes == (nodes[-1].name,)  # named after the node that now serves the slot


def test_a_single_server_s_error_is_reported_at_once() -> None:
    seen, out = _run(
        driving.rerouted(_single(), _call(), "pool", rex.ConnectionError("reset"), END), []
    )
    assert seen == []
    assert isinstance(out, LockUnavailable)
    assert out.nodes == ("127.0.0.1:1",)


def test_the_drivers_keep_no_copy_of_the_re_route_rules() -> None:
    """The rules are core/driving.py's (and core/client.py's): a driver naming one again is a
    second copy that can drift from its twin's."""
    core = Path(driving.__file__).parent
    for name in ("_sync.py", "_async.py"):
        text = (core / name).read_text()
        found = re.findall(r"\b(HOPS|resendable|AskError|MovedError|keeps_order)\b", text)
        assert not found, f"core/{name} decides {found} itself: use core/driving.py"
