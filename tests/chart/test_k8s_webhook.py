"""The chart's sidecar-injection objects: webhook configuration, Service, certificates (both
modes), and the operator flags they hand to `redlease operator`."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path
from typing import Any

import celpy
import helm_python as helm
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from redlease.cli import parse_args
from redlease.cli.login import this_pod
from redlease.cli.operator import operator_config
from redlease.devtools.manifests import render, validate_builtin
from redlease.operator.injection import INJECT_ANNOTATION, LOCK_ANNOTATION

GENERATED: dict[str, Any] = {}
CERT_MANAGER = {"injection": {"certificates": {"certManager": True}}}
ISSUER = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
CERT_MANAGER_ISSUER = {"injection": {"certificates": {"certManager": True, "issuerRef": ISSUER}}}
MODES = {"generated": GENERATED, "cert-manager": CERT_MANAGER, "issuer": CERT_MANAGER_ISSUER}


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container: dict[str, Any] = pod["containers"][0]
    return container


@pytest.mark.parametrize("values", MODES.values(), ids=MODES.keys())
def test_webhook_configuration(chart: helm.Chart, values: dict[str, Any]) -> None:
    docs = render(chart, values)
    mwc = one(docs, "MutatingWebhookConfiguration")
    validate_builtin(mwc)
    (hook,) = mwc["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Ignore"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    # scoped to the operator's namespaces (its RBAC reads DistributedLocks there)
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ops"]}
    ]
    # the Service routes to the operator's named webhook port, on the path kopf serves
    service = hook["clientConfig"]["service"]
    assert service["path"] == "/inject" and service["namespace"] == "ops"
    svc = one(docs, "Service", service["name"])
    validate_builtin(svc)
    (port,) = svc["spec"]["ports"]
    assert port["port"] == service["port"] == 443
    container = operator_container(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == 9443
    assert "--webhook=0.0.0.0:9443" in container["args"]
    assert container["readinessProbe"]["tcpSocket"]["port"] == "webhook"


def test_generated_certificate_is_trusted_through_the_ca_bundle(chart: helm.Chart) -> None:
    docs = render(chart, GENERATED)
    mwc = one(docs, "MutatingWebhookConfiguration")
    bundle = mwc["webhooks"][0]["clientConfig"]["caBundle"]
    secret = one(docs, "Secret", "rl-redlease-webhook-tls")
    validate_builtin(secret)
    assert secret["type"] == "kubernetes.io/tls" and secret["data"]["ca.crt"] == bundle
    ca = x509.load_pem_x509_certificate(base64.b64decode(bundle))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    # signed by the CA the API server is told to trust, for the Service's DNS name
    key = ca.public_key()
    assert isinstance(key, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    key.verify(
        cert.signature,
        cert.tbs_certificate_bytes,
        padding.PKCS1v15(),
        cert.signature_hash_algorithm,
    )
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "rl-redlease-webhook.ops.svc" in sans.get_values_for_type(x509.DNSName)
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(
        days=3000
    )
    # the operator mounts exactly this Secret where its flags point
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-tls")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    mount = next(m for m in operator_container(docs)["volumeMounts"] if m["name"] == "webhook-tls")
    assert f"--webhook-cert={mount['mountPath']}/tls.crt" in operator_container(docs)["args"]


@pytest.mark.parametrize("values", [CERT_MANAGER, CERT_MANAGER_ISSUER], ids=["own-ca", "issuer"])
def test_cert_manager_certificate(chart: helm.Chart, values: dict[str, Any]) -> None:
    docs = render(chart, values)
    assert not [d for d in docs if d["kind"] == "Secret"]
    mwc = one(docs, "MutatingWebhookConfiguration")
    assert "caBundle" not in mwc["webhooks"][0]["clientConfig"]
    namespace, name = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    cert = one(docs, "Certificate", name)
    assert namespace == cert["metadata"]["namespace"] == "ops"
    assert "rl-redlease-webhook.ops.svc" in cert["spec"]["dnsNames"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-tls")
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    issuer = cert["spec"]["issuerRef"]
    if values is CERT_MANAGER_ISSUER:
        assert issuer == ISSUER and not [d for d in docs if d["kind"] == "Issuer"]
    else:
        # our own CA: renewals of the serving certificate keep the CA the API server trusts
        ca_issuer = one(docs, "Issuer", issuer["name"])
        ca_cert = one(docs, "Certificate", "rl-redlease-webhook-ca")
        assert ca_cert["spec"]["isCA"] is True
        assert ca_issuer["spec"]["ca"]["secretName"] == ca_cert["spec"]["secretName"]
        assert one(docs, "Issuer", ca_cert["spec"]["issuerRef"]["name"])["spec"] == {
            "selfSigned": {}
        }


def test_namespace_selector_follows_the_operator_scope(chart: helm.Chart) -> None:
    def selector(values: dict[str, Any]) -> Any:
        return one(render(chart, values), "MutatingWebhookConfiguration")["webhooks"][0][
            "namespaceSelector"
        ]

    assert selector({"operator": {"watchNamespaces": ["a", "b"]}})["matchExpressions"][0][
        "values"
    ] == ["a", "b"]
    clusterwide = selector({"operator": {"watchAllNamespaces": True}})["matchExpressions"][0]
    assert clusterwide["operator"] == "NotIn" and "kube-system" in clusterwide["values"]
    own = {"matchLabels": {"redlease.dev/injection": "enabled"}}
    assert selector({"injection": {"namespaceSelector": own}}) == own


def match_condition(chart: helm.Chart, pod_annotations: dict[str, str] | None) -> bool:
    """The webhook's matchConditions, evaluated with cel-python as the API server would."""
    docs = render(chart, None)
    (condition,) = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]["matchConditions"]
    env = celpy.Environment()
    meta: dict[str, Any] = {"name": "p"}
    if pod_annotations is not None:
        meta["annotations"] = pod_annotations
    program = env.program(env.compile(condition["expression"]))
    return bool(program.evaluate({"object": celpy.json_to_cel({"metadata": meta})}))


@pytest.mark.parametrize(
    ("annotations", "sent"),
    [
        (None, False),
        ({}, False),
        ({"team": "a"}, False),
        ({LOCK_ANNOTATION: "orders"}, True),
        ({LOCK_ANNOTATION: "orders", INJECT_ANNOTATION: "true"}, True),
        ({LOCK_ANNOTATION: "orders", INJECT_ANNOTATION: "false"}, False),
        # other spellings reach the webhook, which decides (and names the annotation)
        ({LOCK_ANNOTATION: "orders", INJECT_ANNOTATION: "no"}, True),
    ],
)
def test_only_pods_asking_for_a_sidecar_are_sent(
    chart: helm.Chart, annotations: dict[str, str] | None, sent: bool
) -> None:
    assert match_condition(chart, annotations) is sent


def test_chart_args_are_accepted_by_the_operator(
    chart: helm.Chart, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's flags as the chart writes them parse into the webhook settings."""
    import os

    for key in [k for k in os.environ if k.startswith("REDLEASE_")]:
        monkeypatch.delenv(key)
    values = {
        "injection": {
            "failurePolicy": "Fail",
            "requireLock": True,
            "sidecarMode": "container",
            "sidecarImage": {"repository": "registry.example/sidecar", "tag": "1.2.3"},
            "sidecarResources": {"requests": {"cpu": "5m"}, "limits": {"memory": "96Mi"}},
            "port": 10443,
        }
    }
    args = operator_container(render(chart, values))["args"]
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("PEM")
    args = [a.replace("/etc/redlease/webhook", str(tmp_path)) for a in args]
    config = operator_config(parse_args(args), this_pod())
    hook = config.webhook
    assert hook is not None
    assert (hook.host, hook.port, hook.failure_policy) == ("0.0.0.0", 10443, "Fail")
    assert hook.certfile == str(tmp_path / "tls.crt")
    assert hook.inject.image == "registry.example/sidecar:1.2.3"
    assert hook.inject.native is False and hook.inject.require_lock is True
    # (Helm merges maps: the default memory request stays)
    assert hook.inject.resources == {
        "requests": {"cpu": "5m", "memory": "64Mi"},
        "limits": {"memory": "96Mi"},
    }
    default = operator_container(render(chart, None))["args"]
    assert "--sidecar-image=ghcr.io/redlease/redlease:0.1.0" in default
    assert "--sidecar-mode=native" in default and "--require-lock" not in default
