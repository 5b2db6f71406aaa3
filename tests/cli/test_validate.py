"""`redlease validate` and `redlease inject`: the spec model's verdicts, every error at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from redlease.cli.validate import problems
from redlease.devtools.sidecarprocs import ROOT, env

sys.path.insert(0, str(ROOT / "tests" / "chart"))
from test_spec_table import CASES  # noqa: E402 - the CRD-and-parser table, reused

THREE_ERRORS = {
    "apiVersion": "redlease.dev/v1alpha1",
    "kind": "DistributedLock",
    "metadata": {"name": "report", "namespace": "apps"},
    "spec": {
        "keys": ["has space"],
        "ttlSeconds": 0,
        "nodes": [{"url": "redis://r0:6379/0?foo=1"}, {"url": "redis://r1"}, {"url": "redis://r2"}],
    },
}


def lock(spec: dict[str, Any]) -> dict[str, Any]:
    return {**THREE_ERRORS, "spec": spec}


@pytest.mark.parametrize(("name", "body", "field"), CASES, ids=[c[0] for c in CASES])
def test_validate_agrees_with_the_crd_and_parser_table(
    name: str, body: dict[str, Any], field: str | None
) -> None:
    found, checked = problems("f.yaml", [lock(body)])
    assert checked == 1
    if field is None:
        assert found == [], name
    else:
        assert found and found[0].field.startswith(field), (name, found)


def test_every_error_at_once_in_one_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([THREE_ERRORS, {"kind": "ConfigMap"}]))
    out = subprocess.run(
        [sys.executable, "-m", "redlease", "validate", "-f", str(bad), "-f",
         "examples/redlock-distributedlock.yaml"],
        capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    fields = [line.split(": ")[4] for line in lines]
    assert fields == ["spec.keys[0]", "spec.ttlSeconds", "spec.nodes[0].url"], lines
    assert all(f"{bad}: DistributedLock/report (document 1)" in line for line in lines)
    good = subprocess.run(
        [sys.executable, "-m", "redlease", "validate", "-f",
         "examples/redlock-distributedlock.yaml"],
        capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert good.returncode == 0 and "1 DistributedLock(s) valid" in good.stdout


def test_inject_lists_every_error_of_the_locks_given(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(THREE_ERRORS))
    out = subprocess.run(
        [sys.executable, "-m", "redlease", "inject", "-f", "examples/injected-deployment.yaml",
         "-f", str(bad)],
        capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert len(out.stderr.splitlines()) == 3, out.stderr


def test_one_ttl_range_for_library_cli_and_crd() -> None:
    import math

    from redlease.cli import main
    from redlease.core.handles import make_options
    from redlease.core.timing import TTL_RANGE
    from redlease.errors import ConfigError

    lo, hi = TTL_RANGE
    for path in ("crds/distributedlock.yaml", "charts/redlease/crds/distributedlock.yaml"):
        crd = yaml.safe_load((ROOT / path).read_text())
        props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        ttl = props["spec"]["properties"]["ttlSeconds"]
        assert (ttl["minimum"], ttl["maximum"]) == (math.ceil(lo), hi), path
    options = {"identity": "x", "handoff": 0.0, "replicas": 0, "replica_timeout": 0.1}
    for ttl_s in (lo, hi):
        make_options(ttl=ttl_s, **options)
    for ttl_s in (lo / 2, hi + 1):
        with pytest.raises(ConfigError, match="ttl"):
            make_options(ttl=ttl_s, **options)
        argv = ["sidecar", "--lock", "x", "--redis", "redis://h", "--ttl", str(ttl_s)]
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
        assert code == 2  # refused before anything starts
    problems_found, _ = problems("f", [lock({"keys": ["a"], "nodes": [{"url": "redis://h"}],
                                             "ttlSeconds": int(hi) + 1})])  # fmt: skip
    assert [p.field for p in problems_found] == ["spec.ttlSeconds"]


MISSPELLED = """\
apiVersion: redlease.dev/v1alpha1
kind: DistributedLock
metadata: {name: invoicer, namespace: apps}
spec:
  keys: [invoicer]
  ttlSecond: 30
  pasued: true
  nodes:
    - url: redis://redis.infra:6379/0
      pasword: hunter2
"""


def test_misspelled_fields_fail_with_path_and_did_you_mean(tmp_path: Path) -> None:
    """The API server would drop all three silently (TTL 15, not paused): validate refuses."""
    bad = tmp_path / "typo.yaml"
    bad.write_text(MISSPELLED)
    out = subprocess.run(
        [sys.executable, "-m", "redlease", "validate", "-f", str(bad)],
        capture_output=True, text=True, env=env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert [line.split("(document 1): ", 1)[1] for line in lines] == [
        "spec.ttlSecond: unknown field (did you mean ttlSeconds?)",
        "spec.pasued: unknown field (did you mean paused?)",
        "spec.nodes[0].pasword: unknown field (a node has only url; credentials go in "
        "spec.auth.secretRef)",
    ], lines
    assert "hunter2" not in out.stderr  # the value of a misplaced field is never shown


@pytest.mark.parametrize(
    ("doc", "fields"),
    [
        ({"sepc": {}}, ["sepc"]),  # top level too (and the missing spec)
        (
            {"spec": {"auth": {"secretRef": {"name": "s", "PasswordKey": "p"}}}},
            ["spec.auth.secretRef.PasswordKey"],
        ),
        (
            {"spec": {"tls": {"caSecretRef": {"name": "c", "kee": "k"}, "insecure": True}}},
            ["spec.tls.caSecretRef.kee", "spec.tls.insecure"],
        ),
        ({"spec": {"nodes": "not a list", "keys": [{"odd": 1}]}}, []),  # types: the parser's
        ({"spec": {1: 2, "x" * 10_000: None}}, ["spec.1", "spec." + "x" * 10_000]),
        ({"metadata": {"anything": 1}, "status": {"whatever": 2}}, []),  # not ours to check
    ],
)
def test_unknown_fields_at_every_level(doc: dict[str, Any], fields: list[str]) -> None:
    from redlease.kube.fields import unknown_fields

    found = unknown_fields({**THREE_ERRORS, "spec": {}, **doc})
    assert [e.field for e in found] == fields
    assert all("unknown field (" in e.message for e in found)
    if fields and fields[0] == "spec.auth.secretRef.PasswordKey":
        assert "did you mean passwordKey?" in found[0].message
