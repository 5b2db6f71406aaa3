"""`redlease validate -f FILE...`: DistributedLock manifests checked offline, every error at once.

The rules are the spec model's (:func:`redlease.kube.spec.parse_spec`: the same verdicts as the
CRD schema and its CEL rules, held together by tests/chart/test_spec_table.py), the object
name's, and :func:`redlease.kube.fields.unknown_fields` (every field the CRD does not declare, with
a did-you-mean: the API server would drop it silently, ``kubectl apply --validate=strict``
refuses it). The parser stops at the first bad field, so :func:`lock_errors` peels: it sets the
field it named aside (an optional one dropped to its default, a required one replaced by a valid
stand-in) and parses again, until the rest is valid. No rule is repeated here.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redlease.cli.command import Command, Flag
from redlease.errors import ConfigError
from redlease.kube.fields import unknown_fields
from redlease.kube.names import API_VERSION, KIND
from redlease.kube.spec import parse_spec, validate_object_name

_STAND_IN = ("keys", "nodes")  # required: replaced by valid stand-ins, never dropped
_PATH = re.compile(r"spec\.(\w+)(?:\[(\d+)\])?")


@dataclass(frozen=True, slots=True)
class Problem:
    """One error: where (file, object) and what (field, why)."""

    source: str
    obj: str
    field: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}: {self.obj}: {self.field}: {self.why}"


def lock_errors(doc: dict[str, Any]) -> list[ConfigError]:
    """Every error of one DistributedLock object (metadata name, unknown fields, spec)."""
    errors: list[ConfigError] = []
    meta = doc.get("metadata")
    try:
        validate_object_name((meta or {}).get("name") if isinstance(meta, dict) else None,
                             "metadata.name")  # fmt: skip
    except ConfigError as exc:
        errors.append(exc)
    errors += unknown_fields(doc)
    spec = copy.deepcopy(doc.get("spec"))
    seen: set[str] = set()
    while True:
        try:
            parse_spec(spec)
            return errors
        except ConfigError as exc:
            errors.append(exc)
            if exc.field in seen or not _set_aside(spec, exc.field):
                return errors
            seen.add(exc.field)


def _set_aside(spec: Any, field: str) -> bool:
    """Drop (or stand in for) the part of ``spec`` that ``field`` names; False if it cannot."""
    match = _PATH.match(field)
    if not isinstance(spec, dict) or match is None or match.group(1) not in spec:
        return False
    key, index = match.group(1), match.group(2)
    items = spec[key]
    if key in _STAND_IN:
        stand_in = _stand_in(key, spec)
        if index is not None and isinstance(items, list) and int(index) < len(items):
            items[int(index)] = stand_in(int(index))  # the others keep their say (count, ...)
        else:
            spec[key] = [stand_in(0)]
    else:
        del spec[key]
    return True


def _stand_in(key: str, spec: dict[str, Any]) -> Any:
    """A valid element for ``spec[key]`` number ``i`` (unique; TLS if the lock uses TLS)."""
    if key == "keys":
        return lambda i: f"stand-in-{i}"
    given = spec.get("nodes")
    nodes: list[Any] = given if isinstance(given, list) else []
    tls = any(isinstance(n, dict) and str(n.get("url", "")).startswith("rediss") for n in nodes)
    scheme = "rediss" if tls else "redis"
    return lambda i: {"url": f"{scheme}://stand-in-{i}.invalid:6379"}


def _objects(docs: list[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, doc in enumerate(docs):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    yield i, item
        elif isinstance(doc, dict):
            yield i, doc


def problems(source: str, docs: list[Any]) -> tuple[list[Problem], int]:
    """Every error of the DistributedLocks in ``docs`` and how many were checked."""
    found: list[Problem] = []
    checked = 0
    for i, doc in _objects(docs):
        if doc.get("kind") != KIND:
            continue
        checked += 1
        name = (
            (doc.get("metadata") or {}).get("name")
            if isinstance(doc.get("metadata"), dict)
            else None
        )
        obj = f"{KIND}/{name or '?'} (document {i + 1})"
        if doc.get("apiVersion") != API_VERSION:
            found.append(Problem(source, obj, "apiVersion", f"must be {API_VERSION}"))
        found += [Problem(source, obj, e.field, e.message) for e in lock_errors(doc)]
    return found, checked


def load(source: str) -> list[Any]:
    """The YAML/JSON documents of ``source`` ('-': stdin); a ConfigError naming the file."""
    import yaml  # type: ignore[import-untyped]

    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise ConfigError(source, exc.strerror or str(exc)) from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(source, f"not YAML/JSON: {' '.join(str(exc).split())}") from None


def run(files: list[str]) -> int:
    """Print every error (file: object: field: why); exit 1 if there was one, else 0."""
    total, checked = [], 0
    for source in files:
        try:
            docs = load(source)
        except ConfigError as exc:
            total.append(Problem(source, "-", "file", exc.message))
            continue
        found, count = problems(source, docs)
        total += found
        checked += count
    for problem in total:
        sys.stderr.write(f"redlease: error: {problem}\n")
    if not total:
        print(f"{checked} DistributedLock(s) valid in {len(files)} file(s)")
    return 1 if total else 0


def main(args: argparse.Namespace) -> int:
    return run(args.filename)


COMMAND = Command(
    name="validate",
    summary="check DistributedLock manifests offline",
    description="Check DistributedLock manifests offline with the rules of the CRD schema, its "
    "CEL rules and the operator; lists every error at once (file: object: field: why). Exit 1 "
    "when there is one.",
    example="redlease validate -f examples/redlock-distributedlock.yaml",
    flags=(
        Flag(
            ("-f", "--filename"),
            "YAML or JSON manifests; '-' for stdin (repeatable)",
            kind="list",
            metavar="FILE",
            required=True,
        ),
    ),
    run=main,
)
