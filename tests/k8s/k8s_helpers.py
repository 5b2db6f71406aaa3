"""Helpers for the offline Kubernetes checks: CRD schema, CEL rules, manifest validation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "distributedlock.yaml"
CHART = ROOT / "charts" / "redlease"
EXAMPLES = ROOT / "examples"
KUBE_VERSION = "1.29.0"  # the chart's minimum (native sidecars, CEL fieldPath)


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
            if not bool(program.evaluate({"self": celpy.json_to_cel(val)})):
                failures.append(rule["message"])
        if isinstance(val, dict):
            for name, child in (node.get("properties") or {}).items():
                if name in val:
                    walk(child, val[name])

    walk(schema, value)
    return failures


def validate_lock(doc: dict[str, Any]) -> list[str]:
    """jsonschema (strict) + CEL on a DistributedLock; returns the CEL failures."""
    schema = version_schema()
    jsonschema.Draft202012Validator(strict(schema)).validate(doc)
    return cel_failures(schema, with_defaults(schema, doc))


def validate_builtin(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
