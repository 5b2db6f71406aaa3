"""The injection webhook end to end: real AdmissionReview requests over HTTPS to the operator's
kopf webhook server (KMock as the API server behind it). Every returned JSON patch is applied
with the `jsonpatch` library and the pod checked with kubernetes-validate (strict) and the
restricted Pod Security rules."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import jsonpatch
import pytest
import pytest_asyncio

from redlease.cli import parse_args
from redlease.cli.login import SA_DIR
from redlease.devtools.kubeemulator import NAMESPACE
from redlease.devtools.manifests import restricted_violations, validate_builtin
from redlease.devtools.pods import API_ACCESS, LOCK_SPEC, deployment_container, deployment_pod
from redlease.devtools.webhookharness import Webhook, parse_answer, review, running_webhook
from redlease.kube.names import ALLOWED_NODES_ANNOTATION, LEADER_LABEL
from redlease.operator import injection
from redlease.operator.injection import (
    API_LOCKS_ANNOTATION,
    DRAIN_TIMEOUT_ANNOTATION,
    HTTP_PORT_ANNOTATION,
    INJECT_ANNOTATION,
    INJECTED_ANNOTATION,
    LOCK_ANNOTATION,
    POD_LABEL_ANNOTATION,
    READY_ANNOTATION,
    SIDECAR_NAME,
    STATE_DIR,
    STATE_VOLUME,
)
from redlease.operator.injection import lookup as lookup_module
from redlease.operator.injection.plan import (
    drain_grace_warning,
)
from redlease.operator.webhook import LockSource

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def webhook(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Webhook]:
    async with running_webhook(tmp_path_factory.mktemp("webhook")) as hook:
        hook.add_lock("orders", LOCK_SPEC)
        hook.add_secret("redis-auth", {"password": "pw"})
        yield hook


def check(pod: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply the webhook's patch as the API server would and validate the result."""
    result: dict[str, Any] = jsonpatch.apply_patch(pod, patch)
    validate_builtin(result)
    assert restricted_violations(result["spec"]) == []
    return result


def sidecar_of(pod: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in pod["spec"].get("initContainers", []) if c["name"] == SIDECAR_NAME]
    return found


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


async def test_deployment_pod_gets_the_sidecar(webhook: Webhook) -> None:
    pod = deployment_pod()
    answer = await webhook.ask(pod)
    assert answer.allowed and answer.warnings == [], answer
    result = check(pod, answer.patch)

    # the same code `redlease inject` runs gives the same pod
    local = injection.plan(
        pod,
        NAMESPACE,
        injection.read_options(pod),  # type: ignore[arg-type]
        injection.LockLookup(
            obj=webhook.api.objects[
                ("redlease.dev/v1alpha1/distributedlocks", NAMESPACE, "orders")
            ].raw
        ),
        injection.InjectConfig(),
    )
    assert local.pod == result
    assert answer.patch == local.patch  # kopf's diff of the planned pod is the planner's patch

    sidecar = sidecar_of(result)
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["args"] == [
        "sidecar",
        "--lock-ref=orders",
        "--ready=connected",
        "--http=127.0.0.1:4040",
        "--probes=0.0.0.0:4041",  # /healthz and /readyz alone, for the httpGet probes
        f"--state-dir={STATE_DIR}",
        "--pinned-node=redis://redis.infra:6379/0",  # the nodes whose consent was checked
    ]
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 4041}
    env = env_of(sidecar)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # v1: the default
    assert env["REDLEASE_PASSWORD"] == {"secretKeyRef": {"name": "redis-auth", "key": "password"}}
    assert env["REDLEASE_USERNAME"]["secretKeyRef"]["optional"] is True
    # the token only in the sidecar: the plugin-added volume and mount are gone
    spec = result["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert API_ACCESS not in {v["name"] for v in spec["volumes"]}
    (app,) = spec["containers"]
    assert app["volumeMounts"] == [{"name": STATE_VOLUME, "mountPath": STATE_DIR, "readOnly": True}]
    assert {m["mountPath"] for m in sidecar["volumeMounts"]} == {STATE_DIR, SA_DIR}
    original = pod["spec"]["containers"][0]
    assert {k: v for k, v in app.items() if k != "volumeMounts"} == {
        k: v for k, v in original.items() if k != "volumeMounts"
    }
    assert result["metadata"]["annotations"][INJECTED_ANNOTATION]
    # re-invocation (the API server may call again): nothing twice, no warning
    again = await webhook.ask(result)
    assert again.allowed and again.patch == [] and again.warnings == []


async def test_existing_init_containers_and_volumes_stay(webhook: Webhook) -> None:
    pod = deployment_pod()
    spec = pod["spec"]
    spec["automountServiceAccountToken"] = True  # the app needs its own token: kept, warned
    spec["initContainers"] = [
        deployment_container("migrate", args=["migrate"], ports=[]),
        deployment_container("proxy", restartPolicy="Always", ports=[]),
    ]
    spec["volumes"] += [
        {"name": "cache", "emptyDir": {}},
        {"name": "cfg", "configMap": {"name": "c"}},
    ]
    spec["containers"].append(deployment_container("worker", ports=[]))
    answer = await webhook.ask(pod)
    assert answer.allowed
    assert [w.split(":")[0] for w in answer.warnings] == ["spec.automountServiceAccountToken"]
    result = check(pod, answer.patch)
    new = result["spec"]
    assert new["initContainers"][:2] == spec["initContainers"]
    assert new["initContainers"][2]["name"] == SIDECAR_NAME and len(new["initContainers"]) == 3
    assert new["volumes"][:3] == spec["volumes"]
    assert [v["name"] for v in new["volumes"][3:]] == [STATE_VOLUME, injection.KUBE_API_VOLUME]
    assert new["automountServiceAccountToken"] is True
    for before, after in zip(spec["containers"], new["containers"], strict=True):
        assert after["volumeMounts"][:-1] == before.get("volumeMounts", [])
        assert after["volumeMounts"][-1]["readOnly"] is True


async def test_the_lock_spec_is_parsed_once_per_admission(
    webhook: Webhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lookup (which Secrets to read), the consent check and the pinned nodes all use the
    one parse made when the lock was found."""
    parses: list[object] = []
    real = lookup_module.parse_spec

    def counting(spec: object) -> Any:
        parses.append(spec)
        return real(spec)

    monkeypatch.setattr(lookup_module, "parse_spec", counting)
    answer = await webhook.ask(deployment_pod())
    assert answer.allowed and answer.patch
    assert "REDLEASE_PASSWORD" in env_of(sidecar_of(check(deployment_pod(), answer.patch)))
    assert parses == [LOCK_SPEC]


@pytest.mark.parametrize(
    "annotations",
    [{}, {LOCK_ANNOTATION: "orders", INJECT_ANNOTATION: "false"}, {"team": "a"}],
    ids=["none", "opted-out", "other"],
)
async def test_pods_not_asking_are_untouched(webhook: Webhook, annotations: dict[str, str]) -> None:
    answer = await webhook.ask(deployment_pod(annotations))
    assert answer.allowed and answer.patch == [] and answer.warnings == []


async def test_missing_lock_is_admitted_with_a_warning(webhook: Webhook) -> None:
    pod = deployment_pod({LOCK_ANNOTATION: "payments"})
    answer = await webhook.ask(pod)
    assert answer.allowed
    (warning,) = answer.warnings
    assert warning.startswith(f"{LOCK_ANNOTATION}: ") and "'payments'" in warning
    assert "not found" in warning
    sidecar = sidecar_of(check(pod, answer.patch))
    assert "REDLEASE_PASSWORD" not in env_of(sidecar)  # nothing known to wire


async def test_lock_is_looked_up_in_the_request_namespace(webhook: Webhook) -> None:
    answer = await webhook.ask(deployment_pod(), namespace="elsewhere")
    assert answer.allowed and "'elsewhere'" in answer.warnings[0]


@pytest.mark.parametrize(
    ("annotations", "field"),
    [
        ({LOCK_ANNOTATION: "Not_A_Name"}, LOCK_ANNOTATION),
        ({LOCK_ANNOTATION: "other-ns/orders"}, LOCK_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", INJECT_ANNOTATION: "nope"}, INJECT_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", READY_ANNOTATION: "sometimes"}, READY_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", HTTP_PORT_ANNOTATION: "80"}, HTTP_PORT_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", HTTP_PORT_ANNOTATION: "8080"}, HTTP_PORT_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", POD_LABEL_ANNOTATION: "yes"}, POD_LABEL_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", API_LOCKS_ANNOTATION: "team-b#jobs/"}, API_LOCKS_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", API_LOCKS_ANNOTATION: ""}, API_LOCKS_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", API_LOCKS_ANNOTATION: "jobs {x}"}, API_LOCKS_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", DRAIN_TIMEOUT_ANNOTATION: "5 min"}, DRAIN_TIMEOUT_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", DRAIN_TIMEOUT_ANNOTATION: "-1s"}, DRAIN_TIMEOUT_ANNOTATION),
        ({LOCK_ANNOTATION: "orders", DRAIN_TIMEOUT_ANNOTATION: ""}, DRAIN_TIMEOUT_ANNOTATION),
    ],
    ids=[
        "lock",
        "lock-ns",
        "inject",
        "ready",
        "port-low",
        "port-taken",
        "pod-label",
        "api-locks-namespace",
        "api-locks-empty",
        "api-locks-chars",
        "drain-unit",
        "drain-negative",
        "drain-empty",
    ],
)
async def test_bad_annotations_are_denied_naming_them(
    webhook: Webhook, annotations: dict[str, str], field: str
) -> None:
    answer = await webhook.ask(deployment_pod(annotations))
    assert not answer.allowed and answer.patch == []
    assert answer.code == 400 and answer.message.startswith(f"{field}: "), answer


async def test_unknown_annotation_and_leader_readiness_warn(webhook: Webhook) -> None:
    pod = deployment_pod(
        {LOCK_ANNOTATION: "orders", READY_ANNOTATION: "leader", "redlease.dev/readiness": "x"}
    )
    answer = await webhook.ask(pod)
    assert answer.allowed
    assert {w.split(":")[0] for w in answer.warnings} == {
        READY_ANNOTATION,
        "unknown annotation redlease.dev/readiness",
    }
    assert "unknown annotation redlease.dev/readiness: did you mean redlease.dev/ready?" in (
        answer.warnings
    )
    sidecar = sidecar_of(check(pod, answer.patch))
    assert "--ready=leader" in sidecar["args"]


async def test_a_misspelt_lock_annotation_warns_with_a_did_you_mean(webhook: Webhook) -> None:
    """No annotation asks for a sidecar, so none is injected; the review's warnings (what
    kubectl prints) say why instead of admitting the pod in silence."""
    pod = deployment_pod({"redlease.dev/lokc": "orders", "redlease.dev/Pod-Labels": "true"})
    answer = await webhook.ask(pod)
    assert answer.allowed and answer.patch == []
    assert answer.warnings == [
        "unknown annotation redlease.dev/Pod-Labels: did you mean redlease.dev/pod-label?",
        "unknown annotation redlease.dev/lokc: did you mean redlease.dev/lock?",
        "no redlease.dev/lock annotation: no sidecar injected (it names the DistributedLock "
        "to follow)",
    ], answer
    # nothing like a known one, and a value never shown
    odd = deployment_pod({"redlease.dev/zzz": "secret-value"})
    answer = await webhook.ask(odd)
    assert answer.allowed and answer.warnings[0] == "unknown annotation redlease.dev/zzz: ignored"
    assert "secret-value" not in str(answer.warnings)


@pytest.mark.parametrize(
    ("consent", "annotations"),
    [
        (False, None),
        (True, {ALLOWED_NODES_ANNOTATION: "redis://redis.other:6379"}),
        (True, {ALLOWED_NODES_ANNOTATION: "rediss://redis.infra:6379"}),  # TLS only
        (True, {ALLOWED_NODES_ANNOTATION: "redis://redis.other:0"}),  # a bad entry
    ],
    ids=["no-consent-label", "node-not-allowed", "tls-only", "bad-entry"],
)
async def test_secret_without_consent_is_not_wired(
    webhook: Webhook, consent: bool, annotations: dict[str, str] | None
) -> None:
    """Secrets only by consent: whoever writes the lock must not be able to route a Secret of
    the namespace into a pod and on to nodes of their choosing. The pod's author learns that
    the Secret does not consent, not why nor which nodes it allows."""
    webhook.add_secret("other-auth", {"password": "x"}, consent=consent, annotations=annotations)
    webhook.add_lock("shared", {**LOCK_SPEC, "auth": {"secretRef": {"name": "other-auth"}}})
    pod = deployment_pod({LOCK_ANNOTATION: "shared"})
    answer = await webhook.ask(pod)
    assert answer.allowed
    (warning,) = answer.warnings
    assert warning.startswith(f"{LOCK_ANNOTATION}: ") and injection.NO_CONSENT in warning
    assert "redis.other" not in warning and "rediss" not in warning
    assert ALLOWED_NODES_ANNOTATION not in warning and "opted in" not in warning
    assert "REDLEASE_PASSWORD" not in env_of(sidecar_of(check(pod, answer.patch)))


async def test_a_lock_with_several_holders_is_injected_with_holders(webhook: Webhook) -> None:
    webhook.add_lock("pool", {**LOCK_SPEC, "holders": 3})
    pod = deployment_pod({LOCK_ANNOTATION: "pool"})
    answer = await webhook.ask(pod)
    assert answer.allowed and answer.warnings == [], answer
    assert "--holders=3" in sidecar_of(check(pod, answer.patch))["args"]


async def test_require_lock_denies_a_missing_lock(tmp_path: Any) -> None:
    async with running_webhook(tmp_path, injection.InjectConfig(require_lock=True)) as hook:
        answer = await hook.ask(deployment_pod({LOCK_ANNOTATION: "payments"}))
        assert not answer.allowed and answer.code == 400
        assert answer.message.startswith(f"{LOCK_ANNOTATION}: ") and "'payments'" in answer.message
        hook.add_lock("payments", LOCK_SPEC)
        answer = await hook.ask(deployment_pod({LOCK_ANNOTATION: "payments"}))
        assert not answer.allowed and "Secret 'redis-auth'" in answer.message  # no Secret yet
        hook.add_secret("redis-auth", {"password": "pw"})
        answer = await hook.ask(deployment_pod({LOCK_ANNOTATION: "payments"}))
        assert answer.allowed and answer.patch


class BrokenLocks(LockSource):
    async def get(self, namespace: str, name: str) -> injection.LockLookup:
        raise RuntimeError("boom")


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
async def test_internal_errors_follow_the_failure_policy(tmp_path: Any, policy: str) -> None:
    async with running_webhook(tmp_path, failure_policy=policy, locks=BrokenLocks) as hook:
        answer = await hook.ask(deployment_pod())
    assert answer.patch == []
    if policy == "Ignore":
        assert answer.allowed and "RuntimeError: boom" in answer.warnings[0]
        assert "admitted without the sidecar" in answer.warnings[0]
    else:
        assert not answer.allowed and answer.code == 500 and "RuntimeError: boom" in answer.message


def _review_with(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = review(deployment_pod())
    doc["request"].update(changes)
    return doc


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request.uid"),
        (b"[1, 2]", "JSON list"),
        (b'{"kind": "AdmissionReview", "request": {"uid": "\xff\xfe"}}', "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
        (
            _dumps({**review(deployment_pod()), "kind": "ConversionReview"}),
            "'ConversionReview'",
        ),
        (
            _dumps({**review(deployment_pod()), "apiVersion": "admission.k8s.io/v1beta1"}),
            "'admission.k8s.io/v1beta1'",
        ),
    ],
    ids=[
        "no-request",
        "json-array",
        "not-utf8",
        "not-json",
        "deep",
        "conversion-review",
        "v1beta1",
    ],
)
async def test_malformed_documents_get_a_clean_400(
    webhook: Webhook, caplog: pytest.LogCaptureFixture, body: bytes, words: str
) -> None:
    caplog.set_level(logging.DEBUG)
    status, text = await webhook.post(body)
    assert status == 400 and words in text, text
    assert "patch" not in text
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"object": "a pod, honest"}, "request.object must be an object"),
        ({"object": {"metadata": ["x"], "spec": {}}}, "request.object.metadata"),
        ({"object": {"metadata": {"annotations": ["x"]}}}, "metadata.annotations"),
        ({"resource": None}, "request.resource"),
        ({"userInfo": None}, "request.userInfo"),
        ({"namespace": None}, "request.namespace"),
        ({"namespace": 7}, "request.namespace"),
    ],
    ids=[
        "object-string",
        "metadata-list",
        "annotations-list",
        "no-resource",
        "no-userinfo",
        "no-ns",
        "ns-number",
    ],
)
async def test_malformed_reviews_are_refused_by_uid(
    webhook: Webhook, caplog: pytest.LogCaptureFixture, changes: dict[str, Any], words: str
) -> None:
    caplog.set_level(logging.DEBUG)
    doc = _review_with(**changes)
    status, text = await webhook.post(_dumps(doc))
    assert status == 200, text
    answer = parse_answer(json.loads(text))
    assert answer.uid == doc["request"]["uid"]
    assert not answer.allowed and answer.patch == [] and answer.code == 400
    assert words in answer.message, answer
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_forged_namespace_is_refused(webhook: Webhook) -> None:
    """The namespace the lock and the Secrets are read from is the one the API server set
    (request.namespace); a pod claiming another one is refused, not injected from there."""
    webhook.add_lock("orders", LOCK_SPEC, namespace="victim")
    webhook.add_secret("redis-auth", {"password": "victim-pw"}, namespace="victim")
    pod = deployment_pod()
    pod["metadata"]["namespace"] = "victim"
    doc = review(pod, namespace=NAMESPACE)
    status, text = await webhook.post(_dumps(doc))
    answer = parse_answer(json.loads(text))
    assert status == 200 and not answer.allowed and answer.patch == []
    assert "'victim'" in answer.message and f"{NAMESPACE!r}" in answer.message
    # the same pod without the claim is injected from the request's namespace
    del pod["metadata"]["namespace"]
    answer = await webhook.ask(pod)
    assert answer.allowed and answer.patch


@pytest.mark.parametrize(
    "port",
    ["²⁰⁴⁸", "٤٠٥٠", " 4_050", "+4050"],
    ids=["superscript", "arabic-indic", "underscore", "sign"],
)
async def test_non_ascii_port_is_denied_naming_the_annotation(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, port: str
) -> None:
    """``"²⁰⁴⁸".isdigit()`` is true and ``int()`` refuses it: with requireLock the pod must
    be denied naming the annotation, not admitted without a sidecar."""
    caplog.set_level(logging.DEBUG)
    async with running_webhook(tmp_path, injection.InjectConfig(require_lock=True)) as hook:
        hook.add_lock("orders", LOCK_SPEC)
        hook.add_secret("redis-auth", {"password": "pw"})
        answer = await hook.ask(deployment_pod({LOCK_ANNOTATION: "orders",
                                                HTTP_PORT_ANNOTATION: port}))  # fmt: skip
    assert not answer.allowed and answer.code == 400, answer
    assert answer.message.startswith(f"{HTTP_PORT_ANNOTATION}: ") and repr(port.strip()) in (
        answer.message
    )
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_leader_label_is_removed_on_injection(webhook: Webhook) -> None:
    """Only the sidecar says who leads: a pod created with redlease.dev/leader=true would get a
    leader Service's traffic until the sidecar's first change."""
    pod = deployment_pod()
    pod["metadata"]["labels"][LEADER_LABEL] = "true"
    answer = await webhook.ask(pod)
    assert answer.allowed
    result = check(pod, answer.patch)
    assert LEADER_LABEL not in result["metadata"]["labels"]
    assert result["metadata"]["labels"]["app"] == "orders"
    # a pod that does not ask for a sidecar is not ours to change
    plain = deployment_pod({})
    plain["metadata"]["labels"][LEADER_LABEL] = "true"
    answer = await webhook.ask(plain)
    assert answer.allowed and answer.patch == []


def _with_grace(pod: dict[str, Any], grace: int | None) -> dict[str, Any]:
    if grace is not None:
        pod["spec"]["terminationGracePeriodSeconds"] = grace
    return pod


async def test_lock_api_and_drain_annotations_become_the_sidecars_flags(webhook: Webhook) -> None:
    """The two annotations reach the sidecar as --api-locks / --drain-timeout (the flag table's
    names, the sidecar's own parser reads them back), the pod's grace period is never changed,
    and a re-invocation adds nothing. A native sidecar gets --app-stops-first: the kubelet
    stops the app before it, so its SIGTERM releases at once (the drain serves hand-offs)."""
    annotations = {LOCK_ANNOTATION: "orders", API_LOCKS_ANNOTATION: "jobs/",
                   DRAIN_TIMEOUT_ANNOTATION: "1m30s"}  # fmt: skip
    pod = _with_grace(deployment_pod(annotations), 120)
    answer = await webhook.ask(pod)
    assert answer.allowed and answer.warnings == [], answer
    result = check(pod, answer.patch)
    args = sidecar_of(result)["args"]
    assert "--app-stops-first" in args
    assert args[-2:] == ["--api-locks=jobs/", "--drain-timeout=90"]
    parsed = parse_args(args)
    assert (parsed.api_locks, parsed.drain_timeout) == ("jobs/", 90.0)
    assert parsed.app_stops_first is True
    assert result["spec"]["terminationGracePeriodSeconds"] == 120
    again = await webhook.ask(result)  # re-invocation: nothing twice
    assert again.allowed and again.patch == [] and again.warnings == []
    # a drain of 0 is off: no flag, no warning (as the sidecar's own default)
    plain = deployment_pod({LOCK_ANNOTATION: "orders", DRAIN_TIMEOUT_ANNOTATION: "0"})
    off = await webhook.ask(plain)
    assert off.allowed and off.warnings == []
    assert not [a for a in sidecar_of(check(plain, off.patch))["args"] if "drain" in a]


@pytest.mark.parametrize(("grace", "warns"), [(None, True), (34, True), (35, False)],
                         ids=["default-30", "short", "enough"])  # fmt: skip
async def test_a_grace_period_shorter_than_the_drain_warns(
    tmp_path: Any, grace: int | None, warns: bool
) -> None:
    """A plain sidecar container drains on SIGTERM: a 30 s drain needs
    terminationGracePeriodSeconds >= 35 (the drain + 5 s for the release); a shorter one
    (Kubernetes' default 30 included) is warned about, never raised."""
    async with running_webhook(tmp_path, inject=injection.InjectConfig(native=False)) as hook:
        hook.add_lock("orders", LOCK_SPEC)
        hook.add_secret("redis-auth", {"password": "pw"})
        pod = deployment_pod({LOCK_ANNOTATION: "orders", DRAIN_TIMEOUT_ANNOTATION: "30s"})
        answer = await hook.ask(_with_grace(pod, grace))
        assert answer.allowed
        expected = drain_grace_warning(30 if grace is None else grace, 30.0)
        assert (expected is not None) is warns
        assert answer.warnings == ([expected] if expected else [])
        if warns:
            assert "set it to at least 35" in answer.warnings[-1]
        assert check(pod, answer.patch)["spec"].get("terminationGracePeriodSeconds") == grace


async def test_plain_container_mode_drain_warns_only_about_the_grace_period(
    tmp_path: Any,
) -> None:
    """A plain sidecar container gets SIGTERM with the app: the drain can be answered (no
    --app-stops-first); the grace period must still cover the drain."""
    async with running_webhook(tmp_path, inject=injection.InjectConfig(native=False)) as hook:
        hook.add_lock("orders", LOCK_SPEC)
        hook.add_secret("redis-auth", {"password": "pw"})
        pod = deployment_pod({LOCK_ANNOTATION: "orders", DRAIN_TIMEOUT_ANNOTATION: "40"})
        answer = await hook.ask(pod)
        assert answer.allowed
        (warning,) = answer.warnings
        assert warning == drain_grace_warning(30, 40.0)
        assert "at least 45" in warning
        enough = await hook.ask(_with_grace(deployment_pod(pod["metadata"]["annotations"]), 45))
        assert enough.allowed and enough.warnings == []
        (sidecar,) = [c for c in check(pod, answer.patch)["spec"]["containers"]
                      if c["name"] == SIDECAR_NAME]  # fmt: skip
        assert "--drain-timeout=40" in sidecar["args"]
        assert "--app-stops-first" not in sidecar["args"]
