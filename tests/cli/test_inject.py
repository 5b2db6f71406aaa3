"""`redlease inject`: manifests in, the same manifests with the sidecar injected out."""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from redlease.cli import main, parse_args
from redlease.cli.inject import pod_templates
from redlease.cli.login import this_pod
from redlease.cli.operator import operator_config
from redlease.devtools.manifests import restricted_violations, validate_builtin
from redlease.devtools.pods import pod_spec
from redlease.devtools.sidecarprocs import ROOT, env
from redlease.errors import ConfigError
from redlease.kube.names import CREDENTIALS_LABEL
from redlease.operator.injection import INJECTED_ANNOTATION, LOCK_ANNOTATION, SIDECAR_NAME

ANNOTATIONS = {LOCK_ANNOTATION: "orders"}
POD_SPEC = pod_spec()
TEMPLATE = {"metadata": {"labels": {"app": "orders"}, "annotations": ANNOTATIONS}, "spec": POD_SPEC}
SELECTOR = {"matchLabels": {"app": "orders"}}


def manifests() -> list[dict[str, Any]]:
    return copy.deepcopy(_manifests())


def _manifests() -> list[dict[str, Any]]:
    def workload(kind: str, api: str = "apps/v1", **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": kind.lower(), "namespace": "apps"},
            "spec": spec,
        }

    job_template = {**TEMPLATE, "spec": {**POD_SPEC, "restartPolicy": "Never"}}
    return [
        workload("Deployment", selector=SELECTOR, template=TEMPLATE),
        workload("StatefulSet", selector=SELECTOR, serviceName="s", template=TEMPLATE),
        workload("Job", api="batch/v1", template=job_template),
        workload(
            "CronJob",
            api="batch/v1",
            schedule="*/5 * * * *",
            jobTemplate={"spec": {"template": job_template}},
        ),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "one", "namespace": "apps", "annotations": ANNOTATIONS},
            "spec": POD_SPEC,
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "orders", "namespace": "apps"},
            "spec": {"selector": {"redlease.dev/leader": "true"}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "redlease.dev/v1alpha1",
            "kind": "DistributedLock",
            "metadata": {"name": "orders", "namespace": "apps"},
            "spec": {
                "keys": ["orders"],
                "nodes": [{"url": "redis://redis:6379/0"}],
                "auth": {"secretRef": {"name": "redis-auth"}},
            },
        },
    ]


def inject_cli(
    args: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(["inject", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_workload_kind_is_injected(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = yaml.safe_dump_all(manifests())
    code, out, err = inject_cli(["-f", "-"], source, monkeypatch, capsys)
    assert code == 0 and err == "", err
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == [d["kind"] for d in manifests()]
    for doc in docs:
        if doc["kind"] != "DistributedLock":
            validate_builtin(doc)
        for template in pod_templates(doc):
            assert template["metadata"]["annotations"][INJECTED_ANNOTATION]
            (side,) = [c for c in template["spec"]["initContainers"] if c["name"] == SIDECAR_NAME]
            password = next(e for e in side["env"] if e["name"] == "REDLEASE_PASSWORD")
            assert password["valueFrom"]["secretKeyRef"]["name"] == "redis-auth"
            assert restricted_violations(template["spec"]) == []
    assert docs[-2:] == manifests()[-2:]  # Service and DistributedLock untouched
    # idempotent: injecting the output again changes nothing
    again = inject_cli(["-f", "-"], out, monkeypatch, capsys)
    assert again == (0, out, "")


def test_missing_lock_warns_and_bad_annotation_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deployment = manifests()[0]
    code, out, err = inject_cli(["-n", "apps"], yaml.safe_dump(deployment), monkeypatch, capsys)
    assert code == 0 and out
    assert err.startswith(f"redlease inject: warning: Deployment/deployment: {LOCK_ANNOTATION}: ")
    assert "not found" in err
    code, out, err = inject_cli(["--require-lock"], yaml.safe_dump(deployment), monkeypatch, capsys)
    assert code == 2 and out == "" and f"{LOCK_ANNOTATION}: " in err
    deployment["spec"]["template"]["metadata"]["annotations"]["redlease.dev/ready"] = "often"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(deployment))
    code, out, err = inject_cli(["-f", str(path)], "", monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err == (
        "redlease: error: Deployment/deployment: redlease.dev/ready: must be one of "
        "connected, leader, always, got 'often'\n"
    )


def test_misspelt_annotations_warn_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workload whose annotations ask for nothing (``lokc``), or whose redlease.dev/lock sits
    on the Deployment instead of its pod template, is printed unchanged (rc 0) -- and stderr
    says why, with a did-you-mean."""
    deployment = manifests()[0]
    deployment["metadata"]["annotations"] = {LOCK_ANNOTATION: "orders"}
    deployment["spec"]["template"]["metadata"]["annotations"] = {"redlease.dev/lokc": "orders"}
    code, out, err = inject_cli(["-f", "-"], yaml.safe_dump(deployment), monkeypatch, capsys)
    assert code == 0 and yaml.safe_load(out) == deployment
    where = "redlease inject: warning: Deployment/deployment: "
    assert err.splitlines() == [
        f"{where}metadata.annotations: {LOCK_ANNOTATION} here is not read: put it in the pod "
        "template's metadata.annotations",
        f"{where}unknown annotation redlease.dev/lokc: did you mean {LOCK_ANNOTATION}?",
        f"{where}no {LOCK_ANNOTATION} annotation: no sidecar injected (it names the "
        "DistributedLock to follow)",
    ]
    # an injected pod warns about its unknown annotations too, and only them
    asked = manifests()[0]
    asked["spec"]["template"]["metadata"]["annotations"]["redlease.dev/htpp-port"] = "4050"
    code, out, err = inject_cli(["-f", "-"], yaml.safe_dump_all([asked, manifests()[-1]]),
                                monkeypatch, capsys)  # fmt: skip
    assert code == 0 and INJECTED_ANNOTATION in out
    assert err == (
        "redlease inject: warning: Deployment/deployment: unknown annotation "
        "redlease.dev/htpp-port: did you mean redlease.dev/http-port?\n"
    )


def test_command_line_and_env(tmp_path: Path) -> None:
    """The installed command, with flags from the environment (REDLEASE_<FLAG>)."""
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(manifests()))
    result = subprocess.run(
        [sys.executable, "-m", "redlease", "inject", "-f", str(path), "--sidecar-mode=container"],
        capture_output=True,
        text=True,
        env=env(REDLEASE_SIDECAR_IMAGE="registry.example/rl:9"),
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    deployment = next(yaml.safe_load_all(result.stdout))
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["app", SIDECAR_NAME]
    assert containers[1]["image"] == "registry.example/rl:9"
    # the Job and CronJob get a warning: a plain sidecar container never lets them complete
    assert result.stderr.count("spec.restartPolicy") == 2
    bad = subprocess.run(
        [sys.executable, "-m", "redlease", "inject", "-f", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        env=env(),
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("redlease: error: --filename: ")
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--webhook=0.0.0.0:9443"], "--webhook-cert"),
        (["--webhook=0.0.0.0:9443", "--webhook-cert=/nonexistent"], "--webhook-cert"),
        (["--webhook=nowhere"], "--webhook"),
        (["--webhook=0.0.0.0:9443", "--sidecar-resources={"], "--sidecar-resources"),
        (["--sidecar-resources=[]"], "--sidecar-resources"),
        (["--sidecar-image= "], "--sidecar-image"),
    ],
)
def test_operator_injection_flags_are_checked(
    args: list[str], flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("REDLEASE_")]:
        monkeypatch.delenv(key)
    with pytest.raises(ConfigError) as bad:
        operator_config(parse_args(["operator", "--namespace=apps", *args]), this_pod())
    assert bad.value.field == flag


def test_a_list_and_a_daemonset(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "apps"},
        "spec": {"selector": SELECTOR, "template": TEMPLATE},
    }
    items = {"apiVersion": "v1", "kind": "List", "items": [daemonset, manifests()[-1]]}
    code, out, err = inject_cli([], yaml.safe_dump(items), monkeypatch, capsys)
    assert code == 0 and err == ""
    (doc,) = yaml.safe_load_all(out)
    pod = doc["items"][0]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == [SIDECAR_NAME]


def test_secret_in_the_input_must_consent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "redis-auth", "namespace": "apps"},
        "stringData": {"password": "pw"},
    }
    docs = [manifests()[0], manifests()[-1], secret]
    code, out, err = inject_cli([], yaml.safe_dump_all(docs), monkeypatch, capsys)
    assert code == 0 and "the lock's Secret does not consent to these nodes" in err
    side = next(yaml.safe_load_all(out))["spec"]["template"]["spec"]["initContainers"][0]
    assert "REDLEASE_PASSWORD" not in {e["name"] for e in side["env"]}
    secret["metadata"]["labels"] = {CREDENTIALS_LABEL: "true"}
    code, out, err = inject_cli([], yaml.safe_dump_all(docs), monkeypatch, capsys)
    assert code == 0 and err == ""


def test_the_injected_example_is_short_and_reviewable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's injected Deployment: 232 lines of output before (three inline Python probe
    programs, one leaf per line); now httpGet probes and compact YAML. What a GitOps reviewer
    sees is the diff between the manifests as given and as injected (both written the same
    way): at most about 60 lines."""
    import difflib

    from redlease.cli.yamlout import WIDTH, dump_all

    source = (ROOT / "examples" / "injected-deployment.yaml").read_text()
    code, out, err = inject_cli(["-f", "-"], source, monkeypatch, capsys)
    assert code == 0 and err == ""
    given = dump_all([d for d in yaml.safe_load_all(source) if d])
    diff = [
        line
        for line in difflib.unified_diff(given.splitlines(), out.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert len(diff) <= 64, "\n".join(diff)
    assert len(out.splitlines()) <= 105
    assert "exec:" not in out and "python -I" not in out
    flow_lines = [line for line in out.splitlines() if "{" in line or "[" in line]
    assert all(len(line) <= WIDTH for line in flow_lines)
    # what it says is what was injected (same documents, only written compactly)
    docs = [d for d in yaml.safe_load_all(source) if d]
    from redlease.cli.inject import inject_documents
    from redlease.operator.injection import InjectConfig

    inject_documents(docs, InjectConfig())
    assert [d for d in yaml.safe_load_all(out) if d] == docs


def test_compact_yaml_keeps_every_value() -> None:
    from redlease.cli.yamlout import dump_all

    tricky = {
        "metadata": {"annotations": {"a": "true", "b": "on", "c": "1.0", "d": "", "e": "x: y",
                                     "f": "- z", "g": "#c", "h": "null", "i": "{j}"}},
        "script": "line 1\nline 2\n",
        "empty": {}, "none": [], "nested": [[1, 2], {"k": [None, True, 1.5]}],
        "long": ["x" * 150, {"y": "z" * 150}],
    }  # fmt: skip
    text = dump_all([tricky, {"kind": "List", "items": []}])
    assert list(yaml.safe_load_all(text)) == [tricky, {"kind": "List", "items": []}]
    assert "script: |" in text  # multi-line strings stay literal blocks
