"""The optional ValidatingAdmissionPolicy that narrows the sidecar's `patch pods` to the leader
label of its own pod: its CEL evaluated with cel-python on allowed and forbidden requests."""

from __future__ import annotations

import copy
from typing import Any

import celpy
import helm_python as helm
import pytest

from redlease.devtools.manifests import POLICY_KUBE_VERSION, render, validate_builtin
from redlease.kube.names import LEADER_LABEL

SA = "system:serviceaccount:apps:redlease-sidecar"
POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
VALUES = {"sidecarRBAC": {"namespaces": ["apps", "jobs"], "podLabel": True, "podLabelPolicy": True}}


@pytest.fixture(scope="module")
def policy_docs(chart: helm.Chart) -> list[dict[str, Any]]:
    kinds = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    return [d for d in render(chart, VALUES) if d["kind"] in kinds]


@pytest.fixture(scope="module")
def policy(policy_docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in policy_docs if d["kind"] == "ValidatingAdmissionPolicy"]
    return found


def test_policy_and_binding_validate(policy_docs: list[dict[str, Any]]) -> None:
    kinds = {d["kind"]: d for d in policy_docs}
    assert set(kinds) == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for doc in policy_docs:
        validate_builtin(doc, POLICY_KUBE_VERSION)
    binding = kinds["ValidatingAdmissionPolicyBinding"]["spec"]
    assert binding["policyName"] == kinds["ValidatingAdmissionPolicy"]["metadata"]["name"]
    assert binding["validationActions"] == ["Deny"]
    assert binding["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "apps",
        "jobs",
    ]


def test_pod_label_without_the_policy_does_not_render(chart: helm.Chart) -> None:
    """`patch pods` without the policy would reach every pod in the namespace (images too)."""
    with pytest.raises(helm.HelmError, match=r"podLabel needs sidecarRBAC\.podLabelPolicy"):
        render(chart, {"sidecarRBAC": {"namespaces": ["apps"], "podLabel": True}})
    docs = render(chart, {"sidecarRBAC": {"namespaces": ["apps"], "podLabelPolicy": True}})
    assert [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]


def pod(**labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "orders-7d9f-abcde",
            "namespace": "apps",
            "labels": {"app": "orders", **labels},
            "annotations": {"redlease.dev/lock": "orders"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "orders-7d9f", "uid": "u1"}],
        },
        "spec": {"containers": [{"name": "app", "image": "example/app:1"}]},
    }


def request(username: str = SA, pod_name: str | None = "orders-7d9f-abcde") -> dict[str, Any]:
    user: dict[str, Any] = {"username": username, "groups": ["system:serviceaccounts"]}
    if pod_name is not None:
        user["extra"] = {POD_NAME_KEY: [pod_name], "authentication.kubernetes.io/pod-uid": ["x"]}
    return {"operation": "UPDATE", "namespace": "apps", "userInfo": user}


def evaluate(policy: dict[str, Any], req: dict[str, Any], old: Any, new: Any) -> list[str] | None:
    """None if the policy does not apply (matchConditions), else the failed messages."""
    env = celpy.Environment()

    def run(expr: str, activation: dict[str, Any]) -> Any:
        program = env.program(env.compile(expr))
        return program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})

    base = {"request": req, "object": new, "oldObject": old}
    spec = policy["spec"]
    if not all(bool(run(c["expression"], base)) for c in spec["matchConditions"]):
        return None
    variables = {v["name"]: run(v["expression"], base) for v in spec["variables"]}
    program_input = {k: celpy.json_to_cel(v) for k, v in base.items()}
    program_input["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    failed = []
    for rule in spec["validations"]:
        program = env.program(env.compile(rule["expression"]))
        if not bool(program.evaluate(program_input)):
            failed.append(rule["message"])
    return failed


def changed(base: dict[str, Any], fn: Any) -> dict[str, Any]:
    new = copy.deepcopy(base)
    fn(new)
    return new


OLD = pod(**{LEADER_LABEL: "false"})
ALLOWED = {
    "becomes leader": (request(), OLD, pod(**{LEADER_LABEL: "true"})),
    "steps down": (request(), pod(**{LEADER_LABEL: "true"}), OLD),
    "first label": (request(), pod(), pod(**{LEADER_LABEL: "false"})),
    "no change": (request(), OLD, OLD),
}
FORBIDDEN = {
    "another pod": (request(pod_name="someone-else"), OLD, pod(**{LEADER_LABEL: "true"})),
    "token not bound to a pod": (request(pod_name=None), OLD, pod(**{LEADER_LABEL: "true"})),
    "image": (
        request(),
        OLD,
        changed(OLD, lambda p: p["spec"]["containers"][0].update(image="evil/miner:1")),
    ),
    "another label": (request(), OLD, pod(**{LEADER_LABEL: "false", "tier": "x"})),
    "another label's value": (
        request(),
        OLD,
        changed(OLD, lambda p: p["metadata"]["labels"].update(app="payments")),
    ),
    "removes a label": (
        request(),
        OLD,
        changed(OLD, lambda p: p["metadata"]["labels"].pop("app")),
    ),
    "annotation": (
        request(),
        OLD,
        changed(OLD, lambda p: p["metadata"]["annotations"].update(x="y")),
    ),
    "owner": (request(), OLD, changed(OLD, lambda p: p["metadata"].pop("ownerReferences"))),
    "finalizer": (
        request(),
        OLD,
        changed(OLD, lambda p: p["metadata"].update(finalizers=["x/y"])),
    ),
    "label value": (request(), OLD, pod(**{LEADER_LABEL: "maybe"})),
}


@pytest.mark.parametrize(("req", "old", "new"), ALLOWED.values(), ids=ALLOWED.keys())
def test_allowed(policy: dict[str, Any], req: Any, old: Any, new: Any) -> None:
    assert evaluate(policy, req, old, new) == []


@pytest.mark.parametrize(("req", "old", "new"), FORBIDDEN.values(), ids=FORBIDDEN.keys())
def test_forbidden(policy: dict[str, Any], req: Any, old: Any, new: Any) -> None:
    failed = evaluate(policy, req, old, new)
    assert failed, "the policy let it through"


def test_other_users_are_not_affected(policy: dict[str, Any]) -> None:
    image = changed(OLD, lambda p: p["spec"]["containers"][0].update(image="new/app:2"))
    for user in ("system:serviceaccount:other:redlease-sidecar", "alice", "system:kube-scheduler"):
        assert evaluate(policy, request(username=user), OLD, image) is None
    jobs = "system:serviceaccount:jobs:redlease-sidecar"
    assert evaluate(policy, request(username=jobs), OLD, image)
