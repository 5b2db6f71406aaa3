"""Helpers for the offline Kubernetes checks: CRD schema, CEL rules, manifest validation."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import yaml  # type: ignore[import-untyped]
from celpy.adapter import json_to_cel

ROOT = Path(__file__).resolve().parents[3]
CRD_FILE = ROOT / "crds" / "distributedlock.yaml"
CHART = ROOT / "charts" / "redlease"
EXAMPLES = ROOT / "examples"
KUBE_VERSION = "1.29.0"  # the chart's minimum (native sidecars, CEL fieldPath)
POLICY_KUBE_VERSION = "1.30.0"  # admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def render(chart: Any, values: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every manifest the chart renders (release "rl" in namespace "ops")."""
    out = chart.render(values, name="rl", namespace="ops", is_install=True)
    return [d for name, text in out.items() if name.endswith(".yaml") for d in load_all(text)]


def lock_object(spec: dict[str, Any]) -> dict[str, Any]:
    """A DistributedLock object with ``spec``."""
    return {
        "apiVersion": "redlease.dev/v1alpha1",
        "kind": "DistributedLock",
        "metadata": {"name": "x", "namespace": "apps"},
        "spec": spec,
    }


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def crd() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CRD_FILE.read_text())
    return doc


def version_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema with unknown fields rejected (the API server would silently prune them,
    which hides typos in samples), and ``metadata`` left open."""
    out = copy.deepcopy(schema)

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and "properties" in node and path != ".metadata":
            node.setdefault("additionalProperties", False)
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            walk(node["items"], path + "[]")

    walk(out, "")
    return out


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Apply the schema's ``default``s like the API server does before CEL runs."""
    if isinstance(value, dict) and schema.get("type") == "object":
        out = dict(value)
        for name, child in (schema.get("properties") or {}).items():
            if name not in out and "default" in child:
                out[name] = copy.deepcopy(child["default"])
            if name in out:
                out[name] = with_defaults(child, out[name])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [with_defaults(schema["items"], v) for v in value]
    return value


def cel_failures(schema: dict[str, Any], value: Any) -> list[str]:
    """Evaluate every ``x-kubernetes-validations`` rule (recursively) with cel-python."""
    env = celpy.Environment()
    failures: list[str] = []

    def walk(node: dict[str, Any], val: Any) -> None:
        for rule in node.get("x-kubernetes-validations") or []:
            program = env.program(env.compile(rule["rule"]))
            if not bool(program.evaluate({"self": json_to_cel(val)})):
                failures.append(rule["message"])
        if isinstance(val, dict):
            for name, child in (node.get("properties") or {}).items():
                if name in val:
                    walk(child, val[name])
        if isinstance(val, list) and isinstance(node.get("items"), dict):
            for item in val:
                walk(node["items"], item)

    walk(schema, value)
    return failures


def _go_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """``pattern`` as the API server applies it (Go regexp: ``$`` is the end of the text, so
    a trailing newline does not match, unlike Python's ``re.search``)."""
    if isinstance(instance, str):
        go = (
            pattern[:-1] + r"\Z"
            if pattern.endswith("$") and not pattern.endswith(r"\$")
            else pattern
        )
        if not re.search(go, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


ApiServerValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _go_pattern}
)


def list_type_failures(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Duplicates in ``x-kubernetes-list-type: set`` lists (the API server refuses them)."""
    failures: list[str] = []
    if isinstance(value, list):
        if schema.get("x-kubernetes-list-type") == "set" and len({repr(v) for v in value}) != len(
            value
        ):
            failures.append(f"{path}: duplicate entries in a set")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                failures += list_type_failures(items, v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name in value:
                failures += list_type_failures(child, value[name], f"{path}.{name}")
    return failures


def validate_lock(doc: dict[str, Any]) -> list[str]:
    """What the API server would say of a DistributedLock: schema errors raise
    ``jsonschema.ValidationError`` (strict: unknown fields too); returns the list-type and CEL
    failures."""
    schema = version_schema()
    ApiServerValidator(strict(schema)).validate(doc)
    failures = list_type_failures(schema, doc)
    return failures + cel_failures(schema, with_defaults(schema, doc))


def api_server_accepts(doc: dict[str, Any]) -> tuple[bool, str]:
    """(accepted, why not) for a DistributedLock, as the API server would decide."""
    try:
        failures = validate_lock(doc)
    except jsonschema.ValidationError as exc:
        return False, f"schema: {exc.message}"
    return (not failures, "; ".join(failures))


def validate_builtin(doc: dict[str, Any], version: str | None = None) -> None:
    kubernetes_validate.validate(doc, version or KUBE_VERSION, strict=True)


# The restricted Pod Security Standard (https://kubernetes.io/docs/concepts/security/
# pod-security-standards/#restricted), plus the chart's own rule: read-only root filesystems.
_RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def restricted_violations(pod: dict[str, Any], *, read_only_root: bool = True) -> list[str]:
    """What in a pod spec breaks the restricted Pod Security level (empty list: nothing)."""
    bad: list[str] = []
    pod_sc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            bad.append(f"spec.{key}")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            bad.append(f"volume {volume['name']}: {sorted(kinds)}")
    if pod_sc.get("runAsUser") == 0:
        bad.append("spec.securityContext.runAsUser: 0")
    containers = [
        (kind, c)
        for kind in ("initContainers", "containers", "ephemeralContainers")
        for c in pod.get(kind) or []
    ]
    for kind, c in containers:
        where = f"{kind}[{c['name']}]"
        sc = c.get("securityContext") or {}
        caps = sc.get("capabilities") or {}
        if sc.get("privileged"):
            bad.append(f"{where}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{where}: allowPrivilegeEscalation must be false")
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{where}: capabilities must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(f"{where}: capabilities.add {caps['add']}")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            bad.append(f"{where}: runAsNonRoot must be true")
        if sc.get("runAsUser") == 0:
            bad.append(f"{where}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost")
        if read_only_root and sc.get("readOnlyRootFilesystem") is not True:
            bad.append(f"{where}: readOnlyRootFilesystem must be true")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                bad.append(f"{where}: hostPort")
    return bad
