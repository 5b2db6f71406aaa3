"""The CRD, its CEL rules, the examples and the Dockerfile, checked offline."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from redlease.cli.inject import inject_documents
from redlease.devtools.manifests import (
    CHART,
    CRD_FILE,
    EXAMPLES,
    ROOT,
    load_all,
    lock_object,
    restricted_violations,
    validate_builtin,
    validate_lock,
)
from redlease.operator.injection import LOCK_ANNOTATION, SIDECAR_NAME, InjectConfig

BASE = {"keys": ["job"], "nodes": [{"url": "redis://redis:6379/0"}]}


def test_chart_ships_the_same_crd() -> None:
    assert (CHART / "crds" / "distributedlock.yaml").read_bytes() == CRD_FILE.read_bytes()


def test_crd_is_a_valid_crd(crd_doc: dict[str, Any]) -> None:
    validate_builtin(crd_doc)
    names = crd_doc["spec"]["names"]
    assert names["shortNames"] == ["dlock", "dlocks"] and names["categories"] == ["redlease"]
    version = crd_doc["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [
        c["name"].upper() for c in version["additionalPrinterColumns"] if "priority" not in c
    ]
    assert columns == ["KEYS", "HOLDERS", "HOLDER", "TOKEN", "TTL", "NODES", "PHASE", "AGE"]
    wide = [c["name"].upper() for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["PAUSED", "EXPIRES", "NODE SET"]


def test_schema_rejects_unknown_fields() -> None:
    # (every other spec rule is in the table of test_spec_table.py, checked against the parser)
    with pytest.raises(jsonschema.ValidationError):
        validate_lock(lock_object({**BASE, "unknownField": 1}))


def example_docs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}#{i}", doc)
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for i, doc in enumerate(load_all(path.read_text()))
    ]


@pytest.mark.parametrize(
    ("where", "doc"), example_docs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_examples_validate(where: str, doc: dict[str, Any]) -> None:
    if doc["kind"] == "DistributedLock":
        assert validate_lock(doc) == [], where
    else:
        validate_builtin(doc)


def test_example_kinds_cover_the_brief() -> None:
    docs = dict(example_docs())
    deployment = docs["singleton-deployment.yaml#0"]
    pod = deployment["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["args"][0] == "sidecar"
    # rollout-safe: readiness is "connected" (every pod Ready), the leader gets the traffic
    assert "--ready=connected" in sidecar["args"] and "--pod-label" in sidecar["args"]
    service = docs["singleton-deployment.yaml#1"]
    assert service["kind"] == "Service"
    assert service["spec"]["selector"]["redlease.dev/leader"] == "true"
    assert restricted_violations(pod) == []
    # the Kubernetes token only in the sidecar
    assert pod["automountServiceAccountToken"] is False
    (app,) = pod["containers"]
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert token in {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert token not in {m["mountPath"] for m in app["volumeMounts"]}
    shared = {m["name"] for m in sidecar["volumeMounts"]}
    (app,) = pod["containers"]
    assert shared & {m["name"] for m in app["volumeMounts"]}
    assert any("emptyDir" in v for v in pod["volumes"] if v["name"] in shared)
    assert "redlease wait" in " ".join(app["args"])
    cron = next(d for d in docs.values() if d["kind"] == "CronJob")
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "run" and "--" in args
    redlock = [
        d for d in docs.values() if d["kind"] == "DistributedLock" and len(d["spec"]["nodes"]) == 3
    ]
    assert redlock and redlock[0]["spec"]["quorum"] == 2


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "style", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("\nFROM ") + text.startswith("FROM ") >= 2  # multi-stage
    assert 'ENTRYPOINT ["redlease"]' in text and "\nUSER 10001" in text


def test_injected_example_is_short_and_injects_cleanly() -> None:
    path = EXAMPLES / "injected-deployment.yaml"
    docs = load_all(path.read_text())
    deployment, lock, service = docs
    text = path.read_text().split("---")[0]
    assert len([line for line in text.splitlines() if not line.startswith("#")]) <= 25
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations[LOCK_ANNOTATION] == lock["metadata"]["name"]
    assert service["spec"]["selector"]["redlease.dev/leader"] == "true"
    warnings, denials = inject_documents(docs, InjectConfig())
    assert (warnings, denials) == ([], [])
    validate_builtin(deployment)
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == [SIDECAR_NAME]
    assert restricted_violations(pod) == []


def test_image_supply_chain_is_pinned() -> None:
    """Base image by digest, every dependency from requirements/image.txt with hashes (whose
    agreement with pyproject tests/devtools/test_locks.py checks), no pip in the runtime
    stage."""
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:" in text and "@sha256:" in text.split("ARG PYTHON_IMAGE=")[1]
    assert "--require-hashes" in text and "requirements/image.txt" in text
    runtime = text.rsplit("\nFROM ", 1)[1]
    assert "pip uninstall" in runtime and "pip install" not in runtime
