"""The chart's trust boundaries: a NetworkPolicy for the operator's ports, least-privilege RBAC
(no `patch pods` without the policy, Leases by name, no cluster-wide Secret read unless asked
for) and images pinned by digest."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
from test_k8s_chart import grants, rules_of

from redlease.devtools.manifests import render, validate_builtin

DIGEST = "sha256:" + "ab" * 32
MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


def operator_args(docs: list[dict[str, Any]]) -> list[str]:
    deployment = one(docs, "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def test_network_policy_admits_the_webhook_port_only(chart: helm.Chart) -> None:
    docs = render(chart, None)
    policy = one(docs, "NetworkPolicy")
    validate_builtin(policy)
    deployment = one(docs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress: Redis and the API, anywhere
    # the webhook port from anywhere (the API server has no address to name), nothing else
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 9443, "protocol": "TCP"}]}]


def test_network_policy_metrics_only_from_the_configured_peers(chart: helm.Chart) -> None:
    values = {
        "serviceMonitor": {"enabled": True, "port": 9095},
        "networkPolicy": {"metricsFrom": MONITORING},
    }
    ingress = one(render(chart, values), "NetworkPolicy")["spec"]["ingress"]
    assert ingress[1] == {"from": MONITORING, "ports": [{"port": 9095, "protocol": "TCP"}]}
    # metrics served but no peers named: the port stays closed to other pods
    closed = one(render(chart, {"serviceMonitor": {"enabled": True}}), "NetworkPolicy")
    assert [r["ports"][0]["port"] for r in closed["spec"]["ingress"]] == [9443]
    # no webhook, no metrics: nothing may connect
    none = one(render(chart, {"injection": {"enabled": False}}), "NetworkPolicy")
    assert none["spec"]["ingress"] == []


def test_network_policy_can_be_turned_off(chart: helm.Chart) -> None:
    docs = render(chart, {"networkPolicy": {"enabled": False}})
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_no_pod_patch_without_the_policy(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError, match="podLabelPolicy"):
        render(chart, {"sidecarRBAC": {"namespaces": ["apps"], "podLabel": True}})
    docs = render(
        chart, {"sidecarRBAC": {"namespaces": ["apps"], "podLabel": True, "podLabelPolicy": True}}
    )
    assert ("", "pods", "patch") in grants(rules_of(docs, "Role")["apps/rl-redlease-sidecar"])
    assert one(docs, "ValidatingAdmissionPolicy")


def test_lease_mirror_patches_only_its_leases(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmError, match="leaseNames"):
        render(chart, {"sidecarRBAC": {"namespaces": ["apps"], "leaseMirror": True}})
    values = {"sidecarRBAC": {"namespaces": ["apps"], "leaseMirror": True, "leaseNames": ["a"]}}
    rules = rules_of(render(chart, values), "Role")["apps/rl-redlease-sidecar"]
    leases = [r for r in rules if "leases" in r["resources"]]
    for rule in leases:
        if set(rule["verbs"]) & {"get", "patch"}:
            assert rule["resourceNames"] == ["a"]
        else:
            assert rule["verbs"] == ["create"]  # RBAC cannot limit create by name
    assert {v for r in leases for v in r["verbs"]} == {"get", "patch", "create"}


def secret_grants(docs: list[dict[str, Any]]) -> dict[str, bool]:
    """Role or ClusterRole name -> whether it grants `get` on Secrets (without resourceNames)."""
    out = {}
    for kind in ("Role", "ClusterRole"):
        for name, rules in rules_of(docs, kind).items():
            out[f"{kind}:{name}"] = any(
                "secrets" in r["resources"] and "get" in r["verbs"] and not r.get("resourceNames")
                for r in rules
            )
    return out


def test_no_cluster_wide_secret_read_unless_asked(chart: helm.Chart) -> None:
    clusterwide = {"operator": {"watchAllNamespaces": True}}
    grants_by_role = secret_grants(render(chart, clusterwide))
    assert grants_by_role["ClusterRole:/rl-redlease"] is False
    assert not any(grants_by_role.values())
    # the namespaces named get a Role each
    named = {"operator": {"watchAllNamespaces": True, "secretNamespaces": ["apps", "jobs"]}}
    grants_by_role = secret_grants(render(chart, named))
    assert {k for k, v in grants_by_role.items() if v} == {
        "Role:apps/rl-redlease-secrets",
        "Role:jobs/rl-redlease-secrets",
    }
    # only when asked for
    asked = {"operator": {"watchAllNamespaces": True, "secretsClusterWide": True}}
    assert secret_grants(render(chart, asked))["ClusterRole:/rl-redlease"] is True
    # namespaced mode: the watched namespaces only, as before
    assert secret_grants(render(chart, None))["Role:ops/rl-redlease"] is True


def test_images_by_digest(chart: helm.Chart) -> None:
    docs = render(chart, {"image": {"digest": DIGEST}})
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"ghcr.io/redlease/redlease@{DIGEST}"
    assert f"--sidecar-image=ghcr.io/redlease/redlease@{DIGEST}" in operator_args(docs)
    # a sidecar image of its own: its own digest, never the operator's
    own = {"repository": "reg.example/sidecar", "digest": "sha256:" + "cd" * 32}
    args = operator_args(
        render(chart, {"image": {"digest": DIGEST}, "injection": {"sidecarImage": own}})
    )
    assert f"--sidecar-image=reg.example/sidecar@sha256:{'cd' * 32}" in args
    tagged = {"repository": "reg.example/sidecar", "tag": "1.2"}
    args = operator_args(
        render(chart, {"image": {"digest": DIGEST}, "injection": {"sidecarImage": tagged}})
    )
    assert "--sidecar-image=reg.example/sidecar:1.2" in args


@pytest.mark.parametrize(
    "values",
    [
        {"image": {"digest": "latest"}},
        {"image": {"digest": "sha256:abc"}},
        {"injection": {"sidecarImage": {"digest": "md5:" + "a" * 32}}},
        {"networkPolicy": {"enabled": "yes"}},
        {"operator": {"secretNamespaces": ["Not_A_Namespace"]}},
    ],
)
def test_bad_values_are_rejected(chart: helm.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)


def test_notes_say_when_no_scraper_may_reach_metrics(chart: helm.Chart) -> None:
    def notes(values: dict[str, Any]) -> str:
        out = chart.render(values, name="rl", namespace="ops", is_install=True)
        return str(out["redlease/templates/NOTES.txt"])

    assert "networkPolicy.metricsFrom" in notes({"serviceMonitor": {"enabled": True}})
    peers = {"serviceMonitor": {"enabled": True}, "networkPolicy": {"metricsFrom": MONITORING}}
    assert "networkPolicy.metricsFrom" not in notes(peers)
