"""The one v1 Event builder of the operator and the sidecar."""

from __future__ import annotations

from redlease.kube.events import MAX_MESSAGE, MAX_NAME, event_body


def test_named_when_decided_within_the_name_limit() -> None:
    ref = {"kind": "DistributedLock", "namespace": "shop", "name": "x" * 253}
    a = event_body(ref, type="Normal", reason="R", message="m", component="c", instance="i")
    b = event_body(ref, type="Normal", reason="R", message="m", component="c", instance="i")
    assert a["metadata"]["name"] != b["metadata"]["name"]  # two decisions, two Events
    assert len(a["metadata"]["name"]) <= MAX_NAME
    assert a["metadata"]["namespace"] == "shop" and a["involvedObject"] == ref
    assert a["source"] == {"component": "c"}


def test_long_messages_are_cut_and_the_host_is_kept() -> None:
    ref = {"namespace": "shop", "name": "lock"}
    body = event_body(
        ref, type="Warning", reason="R", message="y" * 5000, component="c", instance="i", host="h"
    )
    assert len(body["message"]) == MAX_MESSAGE and body["message"].endswith("...")
    assert body["source"] == {"component": "c", "host": "h"}
