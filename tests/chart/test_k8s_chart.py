"""The Helm chart: lint, render with default and non-default values, validate every manifest."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest

from redlease.devtools.manifests import (
    CHART,
    CRD_FILE,
    POLICY_KINDS,
    POLICY_KUBE_VERSION,
    render,
    restricted_violations,
    validate_builtin,
)
from redlease.devtools.quickstart import set_values

OTHER = {
    "replicaCount": 0,
    "image": {"repository": "registry.example/redlease", "tag": "9.9.9", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "operator": {
        "watchNamespaces": ["team-a", "team-b"],
        "refreshSeconds": 2.5,
        "concurrency": 4,
        "nodeTimeoutSeconds": 1,
        "readSecrets": False,
        "verbose": True,
        "healthPort": 8081,
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
    },
    "serviceAccount": {"create": True, "name": "lock-operator", "annotations": {"a": "b"}},
    "sidecarRBAC": {
        "namespaces": ["team-a"],
        "secretNames": ["redis-auth"],
        "podLabel": True,
        "podLabelPolicy": True,
    },
    "injection": {
        "failurePolicy": "Fail",
        "timeoutSeconds": 3,
        "requireLock": True,
        "sidecarMode": "container",
        "sidecarImage": {"repository": "registry.example/sidecar", "tag": "1.2.3"},
        "sidecarResources": {"requests": {"cpu": "5m"}, "limits": {"memory": "64Mi"}},
        "port": 10443,
        "objectSelector": {"matchLabels": {"team": "a"}},
        "certificates": {"certManager": True},
    },
    "podAnnotations": {"prometheus.io/scrape": "false"},
    "podLabels": {"team": "platform"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "system-cluster-critical",
    "serviceMonitor": {"enabled": True, "port": 9095, "interval": "15s", "labels": {"r": "x"}},
    "monitoring": {
        "prometheusRule": {"enabled": True, "labels": {"r": "x"}, "flappingTransitions": 5},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "redlease"}},
        "sidecarPodMonitor": {"enabled": True, "interval": "10s"},
    },
    "devRedis": {"enabled": True},
}
CLUSTERWIDE = {
    "operator": {"watchAllNamespaces": True},
    "monitoring": {"sidecarPodMonitor": {"enabled": True}},
    "sidecarRBAC": {"namespaces": ["a"]},
    "injection": {
        "certificates": {"certManager": True, "issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}
    },
}
VALUE_SETS = {"default": None, "other": OTHER, "clusterwide": CLUSTERWIDE}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_lint(values: dict[str, Any] | None) -> None:
    report = helm.lint(str(CHART), values, strict=True, namespace="ops")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_rendered_manifests_validate(chart: helm.Chart, values: dict[str, Any] | None) -> None:
    docs = render(chart, values)
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            spec = doc["spec"]  # no offline schema for the Prometheus Operator's CRDs
            if doc["kind"] == "ServiceMonitor":
                assert spec["selector"]["matchLabels"] and spec["endpoints"][0]["port"] == "metrics"
            elif doc["kind"] == "PodMonitor":
                assert spec["podMetricsEndpoints"][0]["port"] == "redlease-metrics"
            else:  # PrometheusRule: test_k8s_monitoring parses every expression
                assert doc["kind"] == "PrometheusRule" and spec["groups"]
            continue
        if doc["apiVersion"].startswith("cert-manager.io/"):
            continue  # no offline schema either: test_webhook_certificates checks them
        validate_builtin(doc, POLICY_KUBE_VERSION if doc["kind"] in POLICY_KINDS else None)


def pods(docs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for doc in docs:
        if doc["kind"] == "Deployment":
            yield doc["spec"]["template"]["spec"]


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_restricted_pod_security(chart: helm.Chart, values: dict[str, Any] | None) -> None:
    for pod in pods(render(chart, values)):
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert restricted_violations(pod) == []


def rules_of(docs: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    return {
        f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}": d["rules"]
        for d in docs
        if d["kind"] == kind
    }


def test_rbac_least_privilege(chart: helm.Chart) -> None:
    default = render(chart, None)
    assert not rules_of(default, "ClusterRole")  # namespaced by default
    roles = rules_of(default, "Role")
    assert set(roles) == {"ops/rl-redlease", "ops/rl-redlease-leader"}
    operator_rules = roles["ops/rl-redlease"]
    granted = {
        (g, r, v)
        for rule in operator_rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert ("redlease.dev", "distributedlocks/status", "patch") in granted
    assert ("", "events", "create") in granted
    assert ("redlease.dev", "distributedlocks", "watch") in granted
    for docs in (default, render(chart, OTHER), render(chart, CLUSTERWIDE)):
        for rules in [*rules_of(docs, "Role").values(), *rules_of(docs, "ClusterRole").values()]:
            for rule in rules:
                assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
                assert not {"delete", "deletecollection", "escalate", "bind"} & set(rule["verbs"])
    # leader election: the one Lease by name (create cannot be limited by name)
    assert grants(roles["ops/rl-redlease-leader"]) == {
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "patch"),
        ("coordination.k8s.io", "leases", "create"),
    }
    named = [r for r in roles["ops/rl-redlease-leader"] if "resourceNames" in r]
    assert named[0]["resourceNames"] == ["rl-redlease"] and named[0]["verbs"] == ["get", "patch"]
    other = render(chart, OTHER)
    roles = rules_of(other, "Role")
    assert set(roles) == {
        "team-a/rl-redlease",
        "team-b/rl-redlease",
        "team-a/rl-redlease-sidecar",
        "ops/rl-redlease-leader",
    }
    assert not any("secrets" in r["resources"] for r in roles["team-a/rl-redlease"])
    (secret_rule,) = [r for r in roles["team-a/rl-redlease-sidecar"] if "secrets" in r["resources"]]
    assert secret_rule["resourceNames"] == ["redis-auth"] and secret_rule["verbs"] == ["get"]
    assert rules_of(render(chart, CLUSTERWIDE), "ClusterRole")


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_sidecar_rbac_is_lock_reading_only_unless_asked(chart: helm.Chart) -> None:
    """The sidecar reads and watches its DistributedLock and reads its own Namespace (the
    shared-keys label); pods (podLabel) and Secrets (by name) only when asked; podLabel is off
    by default because RBAC cannot narrow it to one pod."""
    docs = render(chart, {"sidecarRBAC": {"namespaces": ["apps"]}})
    sidecar = rules_of(docs, "Role")["apps/rl-redlease-sidecar"]
    assert grants(sidecar) == {
        ("redlease.dev", "distributedlocks", "get"),
        ("redlease.dev", "distributedlocks", "watch"),
        ("", "namespaces", "get"),
    }
    (ns_rule,) = [r for r in sidecar if "namespaces" in r["resources"]]
    assert ns_rule["resourceNames"] == ["apps"]
    assert not [d for d in docs if d["kind"] in POLICY_KINDS]
    other = rules_of(render(chart, OTHER), "Role")["team-a/rl-redlease-sidecar"]
    assert ("", "pods", "patch") in grants(other) and ("", "pods", "get") not in grants(other)


def test_operator_rbac_unchanged_by_injection(chart: helm.Chart) -> None:
    """The webhook needs only `get` on DistributedLocks, which the operator has already."""
    with_webhook = rules_of(render(chart, None), "Role")
    without = rules_of(render(chart, {"injection": {"enabled": False}}), "Role")
    assert with_webhook == without
    rules = with_webhook["ops/rl-redlease"]
    assert ("redlease.dev", "distributedlocks", "get") in grants(rules)


def test_values_change_the_render(chart: helm.Chart) -> None:
    docs = render(chart, OTHER)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    operator = deployments["rl-redlease"]
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert operator["spec"]["replicas"] == 0
    assert container["image"] == "registry.example/redlease:9.9.9"
    assert "--namespace=team-a" in container["args"] and "--namespace=team-b" in container["args"]
    assert "--metrics=0.0.0.0:9095" in container["args"] and "--verbose" in container["args"]
    assert "rl-redlease-dev-redis" in deployments
    kinds = {d["kind"] for d in docs}
    assert {"ServiceMonitor", "Service", "ServiceAccount", "Role", "RoleBinding"} <= kinds
    default = render(chart, None)
    assert {d["kind"] for d in default} == {
        "Deployment",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Service",
        "Secret",
        "MutatingWebhookConfiguration",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    off = render(chart, {"injection": {"enabled": False}, "replicaCount": 1})
    assert {d["kind"] for d in off} == {
        "Deployment", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy",
    }  # fmt: skip
    args = next(d for d in default if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert args[:2] == ["operator", "--namespace=ops"]


def test_chart_ships_crd_and_notes(chart: helm.Chart) -> None:
    (shipped,) = chart.crds
    assert shipped["filename"].endswith("crds/distributedlock.yaml")
    assert shipped["data"] == CRD_FILE.read_text()
    notes = chart.render(None, name="rl", namespace="ops", is_install=True)[
        "redlease/templates/NOTES.txt"
    ]
    assert "kubectl get distributedlocks" in notes and "never upgraded" in notes


@pytest.mark.parametrize(
    "values",
    [
        {"unknownKey": 1},
        {"replicaCount": 2, "operator": {"leaderElection": {"enabled": False}}},
        {"replicaCount": 11},
        {"operator": {"leaderElection": {"leaseDurationSeconds": "long"}}},
        {"monitoring": {"prometheusRule": {"flappingWindow": "soon"}}},
        {"monitoring": {"prometheusRule": {"renewLatencyFraction": 0}}},
        {"monitoring": {"grafanaDashboard": {"bogus": True}}},
        {"sidecarRBAC": {"leaseMirror": "yes"}},
        {"operator": {"refreshSeconds": "fast"}},
        {"operator": {"watchNamespaces": ["Not_A_Namespace"]}},
        {"image": {"repository": "x", "bogus": True}},
        {"serviceMonitor": {"interval": "soon"}},
        {"devRedis": {"enabled": "yes"}},
        {"injection": {"timeoutSeconds": 10}},
        {"injection": {"failurePolicy": "Maybe"}},
        {"injection": {"sidecarMode": "sidecar"}},
        {"injection": {"port": 80}},
        {"injection": {"sidecarImage": {"repository": "has space"}}},
        {"injection": {"sidecarResources": {"requests": {"cpu": ["1"]}}}},
        {
            "injection": {
                "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}
            }
        },
        {"injection": {"certificates": {"issuerRef": {"name": "x", "kind": "Secret"}}}},
        {"injection": {"certificates": {"issuerRef": {"kind": "Issuer"}}}},
        {"injection": {"certificates": {"validityDays": 0}}},
        {"sidecarRBAC": {"podLabelPolicy": "yes"}},
    ],
)
def test_schema_violations_are_rejected(chart: helm.Chart, values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)
    with pytest.raises(helm.HelmError):
        chart.render(values, name="rl", namespace="ops", is_install=True)


def test_two_replicas_elect_one_active(chart: helm.Chart) -> None:
    """The default: 2 replicas with leader election (a Lease named after the release), a
    rolling update that keeps a webhook server, a PDB, and the pod's name as identity."""
    docs = render(chart, None)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert "--leader-election" in args and "--lease-name=rl-redlease" in args
    assert "--lease-namespace=ops" in args and "--lease-duration=15" in args
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"][:2]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    single = render(chart, {"replicaCount": 1, "operator": {"leaderElection": {"enabled": False}}})
    deployment = next(d for d in single if d["kind"] == "Deployment")
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    assert (
        "--leader-election" not in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"]
    assert "rl-redlease-leader" not in {
        d["metadata"]["name"] for d in single if d["kind"] == "Role"
    }


def test_sidecar_rbac_for_the_lease_mirror_and_events(chart: helm.Chart) -> None:
    values = {
        "sidecarRBAC": {
            "namespaces": ["apps"], "leaseMirror": True, "leaseNames": ["orders"], "events": True,
        }
    }  # fmt: skip
    sidecar = rules_of(render(chart, values), "Role")["apps/rl-redlease-sidecar"]
    assert grants(sidecar) == {
        ("redlease.dev", "distributedlocks", "get"),
        ("redlease.dev", "distributedlocks", "watch"),
        ("", "namespaces", "get"),
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "patch"),
        ("", "events", "create"),
    }


@pytest.mark.parametrize(
    ("values", "lock_ns"),
    [
        # the README's install values with the dev Redis
        ({"operator": {"watchNamespaces": ["apps", "jobs"]},
          "sidecarRBAC": {"namespaces": ["apps"]}, "devRedis": {"enabled": True}}, "apps"),
        ({"devRedis": {"enabled": True}}, "ops"),  # watches its own namespace
        ({"operator": {"watchAllNamespaces": True}, "devRedis": {"enabled": True}}, "ops"),
    ],
)  # fmt: skip
def test_notes_sample_lock_is_where_the_operator_looks_and_reaches_the_dev_redis(
    chart: helm.Chart, values: dict[str, Any], lock_ns: str
) -> None:
    """The NOTES' sample lock is applied in a namespace the operator watches, and its node is
    the dev Redis's Service by a name that resolves from that namespace (not the short name,
    which resolves only in the release's namespace)."""
    import re

    out = chart.render(values, name="rl", namespace="ops", is_install=True)
    notes = str(out["redlease/templates/NOTES.txt"])
    assert set(re.findall(r"kubectl apply -n (\S+)", notes)) == {lock_ns}
    assert set(re.findall(r"dlock\S* .*-n (\S+)", notes)) <= {lock_ns}
    (url,) = re.findall(r"url: (redis://\S+)", notes)
    service = next(d for d in render(chart, values) if d["kind"] == "Service"
                   and d["metadata"]["name"].endswith("-dev-redis"))  # fmt: skip
    meta, port = service["metadata"], service["spec"]["ports"][0]["port"]
    assert url == f"redis://{meta['name']}.{meta['namespace']}.svc:{port}/0"


HINT = re.compile(r"#\s*chart:\s*(\S+)")


def _hints() -> list[tuple[str, str]]:
    root = CHART.parents[1]
    files = [*sorted((root / "examples").glob("*.yaml")), *sorted((root / "docs").glob("*.md")),
             root / "README.md"]  # fmt: skip
    return [(f"{f.relative_to(root)}", m) for f in files for m in HINT.findall(f.read_text())]


def test_every_chart_hint_renders_as_written(chart: helm.Chart) -> None:
    """``# chart: VALUES`` in an example or a doc is what to give ``helm install --set``: it
    renders, and what the example needs exists (pod-patch RBAC for the leader label)."""
    hints = _hints()
    assert len(hints) >= 3, hints
    for where, text in hints:
        values = set_values(text)
        docs = render(chart, values)  # refuses e.g. podLabel without podLabelPolicy
        rbac = values.get("sidecarRBAC", {})
        for namespace in rbac.get("namespaces", []):
            roles = [d for d in docs if d["kind"] == "Role"
                     and d["metadata"].get("namespace") == namespace]  # fmt: skip
            assert roles, (where, namespace)
            if rbac.get("podLabel"):
                rules = [r for role in roles for r in role.get("rules", [])]
                assert any("pods" in r.get("resources", []) and "patch" in r.get("verbs", [])
                           for r in rules), where  # fmt: skip
        if rbac.get("podLabel"):
            assert any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs), where
