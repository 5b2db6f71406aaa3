"""The README's Kubernetes quick start, read from the README itself (the ``sh`` block after the
``<!-- quickstart -->`` marker), and the plan ``make e2e`` runs from it.

One source for three readers: ``make e2e`` (redlease.devtools.e2e) runs these commands against a
real cluster, tests/scenarios/test_quickstart.py follows them against the emulator, and both wait
for the same things (:func:`leader`): a README edit that the manifests do not follow fails the
emulator test instead of a new user.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
MARKER = "<!-- quickstart -->"
LOCK = "quickstart"  # the example's DistributedLock and Deployment
ROLLOUT_TIMEOUT = 300.0  # seconds: image pulls on a fresh kind node
HELD_TIMEOUT = 120.0  # the operator's first refresh after the sidecars connect
FAILOVER_TIMEOUT = 120.0  # a TTL (15 s) with room for a slow node


def readme_commands(text: str | None = None) -> list[list[str]]:
    """The quick start's commands, continuation lines joined, comments dropped, split as sh."""
    text = README.read_text() if text is None else text
    start = text.index(MARKER)
    match = re.search(r"```sh\n(.*?)```", text[start:], re.S)
    if match is None:
        raise ValueError(f"README: no ```sh block after {MARKER}")
    joined = match.group(1).replace("\\\n", " ")
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def set_values(text: str) -> dict[str, Any]:
    """Helm's ``--set`` syntax (``a.b=x,c={d,e}``) as values."""
    values: dict[str, Any] = {}
    for item in re.findall(r"[^,{]+(?:\{[^}]*\})?", text):
        key, _, raw = item.strip(",").partition("=")
        value: Any = raw
        if raw.startswith("{"):
            value = [v for v in raw.strip("{}").split(",") if v]
        elif raw in ("true", "false"):
            value = raw == "true"
        *parents, leaf = key.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return values


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _option(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
    return None


@dataclass
class QuickStart:
    """What the README's steps do: the namespaces created, the Helm release (name, namespace,
    chart, ``--set`` values), and the manifests applied (namespace, file)."""

    commands: list[list[str]]
    namespaces: list[str] = field(default_factory=list)
    release: str = ""
    release_namespace: str = ""
    chart: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    applied: list[tuple[str, Path]] = field(default_factory=list)
    rollouts: list[tuple[str, str]] = field(default_factory=list)  # (namespace, deployment/NAME)


def parse(commands: list[list[str]] | None = None) -> QuickStart:
    """The README's quick start as data (see :class:`QuickStart`)."""
    commands = readme_commands() if commands is None else commands
    qs = QuickStart(commands)
    for argv in commands:
        if argv[:3] == ["kubectl", "create", "namespace"]:
            qs.namespaces.append(argv[3])
        elif argv[:2] == ["helm", "install"]:
            qs.release, qs.chart = argv[2], argv[3]
            qs.release_namespace = _option(argv, "-n", "--namespace") or "default"
            for i, arg in enumerate(argv):
                if arg == "--set":
                    _merge(qs.values, set_values(argv[i + 1]))
        elif argv[:2] == ["kubectl", "apply"]:
            namespace = _option(argv, "-n", "--namespace") or "default"
            qs.applied.append((namespace, ROOT / str(_option(argv, "-f", "--filename"))))
        elif argv[:3] == ["kubectl", "rollout", "status"]:
            target = next(a for a in argv[3:] if "/" in a and not a.startswith("-"))
            qs.rollouts.append((_option(argv, "-n", "--namespace") or "default", target))
    return qs


def leader(lock: dict[str, Any]) -> str | None:
    """The holder once the DistributedLock is ``Held`` by exactly one holder (what the quick
    start waits for, on a cluster and on the emulator), else None."""
    status = lock.get("status") or {}
    holder = status.get("holder")
    if status.get("phase") != "Held" or not holder:
        return None
    holders = status.get("holders")
    if isinstance(holders, list) and len(holders) > 1:
        return None
    return str(holder)


@dataclass(frozen=True)
class Stage:
    """One command of the e2e plan: ``argv`` as run, ``why`` as printed."""

    why: str
    argv: list[str]


def plan(qs: QuickStart | None = None) -> list[Stage]:
    """The README's commands in order (``redlease`` run from this checkout), then the teardown:
    the applied manifests deleted (each lock's finalizer needs the operator), the release
    uninstalled. The waits and the failover between them are :mod:`redlease.devtools.e2e`'s."""
    import sys

    qs = parse() if qs is None else qs
    steps: list[Stage] = []
    for argv in qs.commands:
        run = [sys.executable, "-m", "redlease", *argv[1:]] if argv[0] == "redlease" else argv
        if argv[:3] == ["kubectl", "rollout", "status"]:
            run = [*run, f"--timeout={ROLLOUT_TIMEOUT:.0f}s"]  # its default waits for ever
        steps.append(Stage("readme", run))
    for namespace, path in reversed(qs.applied):
        steps.append(Stage("teardown", ["kubectl", "delete", "-n", namespace, "-f", str(path),
                                       "--ignore-not-found", "--wait"]))  # fmt: skip
    steps.append(Stage("teardown", ["helm", "uninstall", qs.release, "-n", qs.release_namespace]))
    return steps
