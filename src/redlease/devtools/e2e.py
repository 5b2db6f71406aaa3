"""``make e2e``: the README's Kubernetes quick start on the current kubectl context (kind,
minikube, a real cluster), then a failover measured.

The plan is :func:`redlease.devtools.quickstart.plan`: the README's commands in order, then
waits for one leader (:func:`~redlease.devtools.quickstart.leader` on the DistributedLock),
the leader's pod deleted, the time until another pod holds the lock, ``kubectl get dlock``,
and the teardown (the example deleted, the release uninstalled), which also runs after a
failure. With no kubectl or no reachable cluster it says so in one line and exits 0: it is not
part of ``make test`` and a laptop without a cluster has nothing to run it on.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from redlease.devtools.quickstart import (
    FAILOVER_TIMEOUT,
    HELD_TIMEOUT,
    LOCK,
    ROOT,
    Stage,
    leader,
    parse,
    plan,
)

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603


def reachable(run: Runner = _run) -> str | None:
    """None when kubectl reaches a cluster, else the one line saying why not."""
    if shutil.which("kubectl") is None:
        return "make e2e: no kubectl on PATH, nothing to run against (skipped)"
    try:
        done = run(["kubectl", "cluster-info", "--request-timeout=10s"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"make e2e: kubectl cluster-info failed ({exc}), no cluster to run against (skipped)"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"make e2e: no reachable cluster in the current kubectl context ({why}) (skipped)"
    return None


def _lock(namespace: str, run: Runner) -> dict[str, object]:
    done = run(["kubectl", "get", "dlock", LOCK, "-n", namespace, "-o", "json"])
    if done.returncode != 0:
        return {}
    obj: dict[str, object] = json.loads(done.stdout)
    return obj


def wait_leader(namespace: str, timeout: float, run: Runner, other_than: str | None = None) -> str:
    """Poll the DistributedLock until one holder (not ``other_than``) holds it."""
    deadline = time.monotonic() + timeout
    while True:
        holder = leader(_lock(namespace, run))
        if holder is not None and holder != other_than:
            return holder
        if time.monotonic() > deadline:
            raise TimeoutError(f"no leader of dlock/{LOCK} in {namespace} within {timeout:.0f} s")
        time.sleep(1.0)  # a cluster poll interval, not a test's synchronisation


def _step(step: Stage, run: Runner) -> None:
    print("+ " + " ".join(step.argv), flush=True)
    done = run(step.argv)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode != 0 and step.why == "readme":
        raise RuntimeError(f"exit {done.returncode}: {' '.join(step.argv)}")


def main(argv: Sequence[str] | None = None, run: Runner = _run) -> int:
    parser = argparse.ArgumentParser(prog="make e2e", description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the release installed")
    args = parser.parse_args(argv)
    why = reachable(run)
    if why is not None:
        print(why)
        return 0
    if shutil.which("helm") is None:
        print("make e2e: a cluster is reachable but helm is not on PATH (https://helm.sh)")
        return 2
    qs = parse()
    steps = plan(qs)
    readme = [s for s in steps if s.why == "readme"]
    teardown = [s for s in steps if s.why == "teardown"]
    namespace = qs.applied[-1][0]
    failed = False
    try:
        for step in readme:
            _step(step, run)
        start = time.monotonic()
        first = wait_leader(namespace, HELD_TIMEOUT, run)
        print(f"leader: {first} ({time.monotonic() - start:.1f} s after the rollout)")
        _step(
            Stage("readme", ["kubectl", "delete", "pod", "-n", namespace, first, "--wait=false"]),
            run,
        )
        start = time.monotonic()
        second = wait_leader(namespace, FAILOVER_TIMEOUT, run, other_than=first)
        print(f"failover: {first} -> {second} in {time.monotonic() - start:.1f} s "
              "(pod deleted -> the DistributedLock's status names the new holder)")  # fmt: skip
        _step(Stage("readme", ["kubectl", "get", "dlock", "-n", namespace]), run)
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
        print(f"make e2e: FAILED: {exc}", file=sys.stderr)
        _step(
            Stage("diagnose", ["kubectl", "get", "pods,dlock", "-n", namespace, "-o", "wide"]),
            run,
        )
        failed = True
    finally:
        if not args.keep:
            for step in teardown:
                _step(step, run)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
