"""The README's Kubernetes quick start, followed against the emulator: the steps are read from
the README (redlease.devtools.quickstart, the same reader ``make e2e`` runs), the chart is
rendered with the README's release, namespace and values, and the manifests the README applies
are applied to KMock, where the operator reconciles the example DistributedLock against a real
redis-server standing in for the chart's dev Redis, and the example Deployment's sidecar
container runs once per replica as the kubelet would start it. The lock ends ``Held`` by one of
them, and after the leader's pod goes another holds it (the waits of ``make e2e``).

Stand-ins (what this cannot check): the node URL's host:port (the dev Redis Service's DNS name,
checked against the rendered Service first) is replaced by the local redis-server's, and only
that; the sidecar's --probes and --http addresses move to free loopback ports (two "pods" share
this host); the state volume is a temporary directory; the API address comes from
REDLEASE_KUBE_API instead of the projected token; the operator runs in-process (running_cluster)
watching the namespace the rendered chart's operator watches.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import helm_python as helm
import pytest

from redlease.devtools import e2e
from redlease.devtools.kubeemulator import AS_ADMIN, NAMESPACE, running_cluster
from redlease.devtools.kubeemulator import until as harness_until
from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.manifests import load_all
from redlease.devtools.pods import kubelet_probe
from redlease.devtools.quickstart import README, ROOT, leader, parse, plan, readme_commands
from redlease.devtools.sidecarprocs import env
from redlease.kube import paths

STATE_DIR = "/var/run/redlease"


def rendered(qs: Any) -> list[dict[str, Any]]:
    with helm.Chart.load(str(ROOT / qs.chart)) as chart:
        out = chart.render(qs.values, name=qs.release, namespace=qs.release_namespace,
                           is_install=True)  # fmt: skip
    return [d for name, text in out.items() if name.endswith(".yaml") for d in load_all(text)]


def manifests(qs: Any) -> list[tuple[str, dict[str, Any]]]:
    """(namespace, object) for every manifest the README applies; a metadata.namespace that
    differs from ``kubectl apply -n`` is what kubectl refuses."""
    out = []
    for namespace, path in qs.applied:
        for doc in load_all(path.read_text()):
            declared = doc["metadata"].get("namespace", namespace)
            assert declared == namespace, (path.name, doc["metadata"]["name"], declared, namespace)
            out.append((namespace, doc))
    return out


def check_agreement(qs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the README's steps create agrees with what its manifests need; returns the example
    DistributedLock and Deployment."""
    docs = rendered(qs)
    objs = manifests(qs)
    assert qs.applied and all(ns in qs.namespaces for ns, _ in qs.applied), qs
    (lock,) = [d for _, d in objs if d["kind"] == "DistributedLock"]
    (deploy,) = [d for _, d in objs if d["kind"] == "Deployment"]
    namespace = lock["metadata"]["namespace"]
    # the operator watches the namespace the lock is applied in
    (operator,) = [d for d in docs if d["kind"] == "Deployment" and "dev-redis" not in
                   d["metadata"]["name"]]  # fmt: skip
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--namespace={namespace}" in args or "--all-namespaces" in args, args
    # every node is the dev Redis's Service by a name that resolves from the lock's namespace
    (service,) = [d for d in docs if d["kind"] == "Service"
                  and d["metadata"]["name"].endswith("-dev-redis")]  # fmt: skip
    meta, port = service["metadata"], service["spec"]["ports"][0]["port"]
    for node in lock["spec"]["nodes"]:
        url = urlsplit(node["url"])
        assert (url.hostname, url.port) == (f"{meta['name']}.{meta['namespace']}.svc", port), url
    # the Deployment's ServiceAccount and the right to read its DistributedLock exist there
    pod = deploy["spec"]["template"]["spec"]
    accounts = [d for d in docs if d["kind"] == "ServiceAccount"
                and d["metadata"].get("namespace") == namespace]  # fmt: skip
    assert pod["serviceAccountName"] in [a["metadata"]["name"] for a in accounts]
    rules = [r for d in docs if d["kind"] == "Role" and d["metadata"].get("namespace") == namespace
             for r in d.get("rules", [])]  # fmt: skip
    assert any("distributedlocks" in r.get("resources", []) and "get" in r.get("verbs", [])
               for r in rules), rules  # fmt: skip
    (sidecar,) = [c for c in pod.get("initContainers", []) if c["name"] == "redlease"]
    assert f"--lock-ref={lock['metadata']['name']}" in sidecar["args"]
    assert ("deployment/" + deploy["metadata"]["name"]) in [d for _, d in qs.rollouts]
    return lock, deploy


def test_readme_quickstart_agrees_with_its_manifests() -> None:
    check_agreement(parse())


def test_a_readme_that_disagrees_with_the_manifests_fails() -> None:
    """The agreement check is not vacuous: each README edit below breaks the quick start."""
    text = README.read_text()
    for old, new in (
        ("watchNamespaces='{apps}'", "watchNamespaces='{payments}'"),  # operator looks elsewhere
        ("helm install redlease ", "helm install rl "),  # the dev Redis is rl-redlease-dev-redis
        ("--set devRedis.enabled=true", ""),  # no dev Redis at all
        ("kubectl apply -n apps", "kubectl apply -n default"),  # kubectl refuses the namespace
    ):
        assert old in text, old
        with pytest.raises((AssertionError, ValueError)):
            check_agreement(parse(readme_commands(text.replace(old, new, 1))))


def _pod_args(container: dict[str, Any], state: Path) -> list[str]:
    args = [a for a in container["args"] if not a.startswith(("--probes=", "--http="))]
    args = [a.replace(f"--state-dir={STATE_DIR}", f"--state-dir={state}") for a in args]
    return [*args, f"--probes=127.0.0.1:{free_port()}", f"--http=127.0.0.1:{free_port()}"]


def _probe(container: dict[str, Any], args: list[str], kind: str) -> bool:
    """The container's httpGet probe on the port its --probes moved to."""
    port = next(a.rsplit(":", 1)[1] for a in args if a.startswith("--probes="))
    probe = {**container[kind], "httpGet": {**container[kind]["httpGet"], "port": int(port)}}
    return kubelet_probe(probe)[0]


def local_node(url: str, port: int) -> str:
    """The node URL with only its host:port moved to the local redis-server."""
    return urlunsplit(urlsplit(url)._replace(netloc=f"127.0.0.1:{port}"))


def start_pod(
    name: str, namespace: str, args: list[str], kube_api: str, logs: Path
) -> subprocess.Popen[bytes]:
    """The sidecar container of pod ``name``, started as the kubelet would (the image's
    ENTRYPOINT is redlease; POD_NAME and POD_NAMESPACE from the downward API)."""
    environ = env(POD_NAME=name, POD_NAMESPACE=namespace, REDLEASE_KUBE_API=kube_api)
    with (logs / f"{name}.log").open("wb") as log:
        return subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "redlease", *args], env=environ, stdout=log, stderr=log, cwd=ROOT
        )


@pytest.mark.slow
async def test_readme_quickstart_on_the_emulator_finds_the_lock_held(tmp_path: Path) -> None:
    qs = parse()
    lock, deploy = check_agreement(qs)
    namespace = lock["metadata"]["namespace"]
    assert namespace == NAMESPACE  # running_cluster's operator watches NAMESPACE
    server = RedisServer().start()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        async with running_cluster() as cluster:
            # the example lock, its node's host:port (only) moved to the local redis-server
            nodes = [{**n, "url": local_node(n["url"], server.port)} for n in lock["spec"]["nodes"]]
            body = {**lock, "spec": {**lock["spec"], "nodes": nodes}}
            path = paths.locks(namespace)
            async with cluster.api.post(path, json=body, headers=AS_ADMIN) as resp:
                assert resp.status == 201, await resp.text()
            spec = deploy["spec"]["template"]["spec"]
            (container,) = [c for c in spec["initContainers"] if c["name"] == "redlease"]
            args_of: dict[str, list[str]] = {}
            for i in range(deploy["spec"]["replicas"]):
                name = f"{deploy['metadata']['name']}-5d8f7-{i}"
                state = Path(tempfile.mkdtemp(prefix="qs-", dir=tmp_path))
                args_of[name] = _pod_args(container, state)
                procs[name] = start_pod(name, namespace, args_of[name], cluster.url, tmp_path)

            def status() -> dict[str, Any]:
                return {"status": cluster.status(lock["metadata"]["name"])}

            async def until(predicate: Any, what: str) -> Any:
                return await harness_until(lambda: asyncio.to_thread(predicate), timeout=60.0,
                                           what=what)  # fmt: skip

            # `kubectl rollout status`: every pod's startup and readiness probes pass
            for name, args in args_of.items():
                await until(lambda a=args: _probe(container, a, "startupProbe"), f"{name} up")
                assert _probe(container, args, "readinessProbe")
            # make e2e's wait: the DistributedLock Held by one of the pods
            first = await until(lambda: leader(status()), "Held")
            assert first in procs, (first, list(procs))
            # the leader's pod is deleted (SIGTERM); another pod holds it
            procs[first].terminate()
            await asyncio.to_thread(procs[first].wait, 30)
            second = await until(lambda: (h := leader(status())) != first and h, "failover")
            assert second in procs and second != first
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
        server.stop()


def test_e2e_plan_runs_the_readme_then_tears_down() -> None:
    """``make e2e`` runs exactly the README's steps (the manifests this module checks), then
    deletes what it applied and uninstalls the release."""
    qs = parse()
    steps = plan(qs)
    readme = [s.argv for s in steps if s.why == "readme"]
    assert len(readme) == len(qs.commands)
    for ran, written in zip(readme, qs.commands, strict=True):
        tail = written[1:] if written[0] == "redlease" else written
        assert ran[: len(tail)] == tail or ran[-len(tail):] == tail, (ran, written)  # fmt: skip
    applied = [ROOT / s.argv[s.argv.index("-f") + 1] for s in steps if "apply" in s.argv]
    assert applied == [path for _, path in qs.applied] and applied
    teardown = [s.argv for s in steps if s.why == "teardown"]
    assert teardown[-1][:3] == ["helm", "uninstall", qs.release]
    assert ["-n", qs.release_namespace] == teardown[-1][3:5]
    deleted = [Path(a[a.index("-f") + 1]) for a in teardown if "delete" in a]
    assert sorted(deleted) == sorted(p for _, p in qs.applied)


def test_e2e_without_a_cluster_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    """No kubectl on PATH, and a kubectl whose cluster-info fails: one line, exit 0."""
    for kubectl in (
        None,
        "#!/bin/sh\necho 'The connection to the server was refused' >&2\nexit 1\n",
    ):
        bindir = tmp_path / ("with" if kubectl else "without")
        bindir.mkdir()
        if kubectl:
            (bindir / "kubectl").write_text(kubectl)
            (bindir / "kubectl").chmod(0o755)
        done = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "redlease.devtools.e2e"], cwd=ROOT, capture_output=True,
            text=True, timeout=60, env={"PATH": str(bindir)}, check=False)  # fmt: skip
        assert done.returncode == 0, done
        assert len(done.stdout.splitlines()) == 1 and done.stderr == "", done
        assert "skipped" in done.stdout
        if kubectl:
            assert "refused" in done.stdout


class FakeCluster:
    """kubectl and helm as a cluster would answer them: the quick start's lock is Held by
    ``holders[0]`` until that pod is deleted, then by the next one. ``fail`` makes the command
    starting with it exit 1."""

    def __init__(self, holders: list[str], fail: list[str] | None = None) -> None:
        self.holders = holders
        self.fail = fail
        self.ran: list[list[str]] = []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.ran.append(argv)
        out = ""
        if self.fail is not None and argv[: len(self.fail)] == self.fail:
            return subprocess.CompletedProcess(argv, 1, "", "error: boom\n")
        if argv[:3] == ["kubectl", "delete", "pod"] and argv[4:6] == ["apps", self.holders[0]]:
            self.holders.pop(0)
        if argv[:4] == ["kubectl", "get", "dlock", "quickstart"]:
            out = json.dumps({"status": {"phase": "Held", "holder": self.holders[0]}})
        return subprocess.CompletedProcess(argv, 0, out, "")


def test_e2e_runs_the_plan_deletes_the_leader_and_tears_down(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(e2e.shutil, "which", lambda name: f"/usr/bin/{name}")
    fake = FakeCluster(["quickstart-a", "quickstart-b"])
    assert e2e.main([], run=fake) == 0
    steps = plan()
    readme = [s.argv for s in steps if s.why == "readme"]
    teardown = [s.argv for s in steps if s.why == "teardown"]
    ran = [a for a in fake.ran if a[:4] != ["kubectl", "get", "dlock", "quickstart"]]
    assert ran[0][:2] == ["kubectl", "cluster-info"]
    assert ran[1 : 1 + len(readme)] == readme
    assert ran[1 + len(readme)] == [
        "kubectl", "delete", "pod", "-n", "apps", "quickstart-a", "--wait=false"]  # fmt: skip
    assert ran[2 + len(readme)] == ["kubectl", "get", "dlock", "-n", "apps"]
    assert ran[3 + len(readme) :] == teardown
    assert "failover: quickstart-a -> quickstart-b in" in capsys.readouterr().out


def test_e2e_a_failed_step_still_uninstalls_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(e2e.shutil, "which", lambda name: f"/usr/bin/{name}")
    fake = FakeCluster(["quickstart-a"], fail=["kubectl", "apply"])
    assert e2e.main([], run=fake) == 1
    assert not [a for a in fake.ran if a[:3] == ["kubectl", "delete", "pod"]]
    teardown = [s.argv for s in plan() if s.why == "teardown"]
    assert fake.ran[-len(teardown) :] == teardown
    assert "FAILED: exit 1: kubectl apply" in capsys.readouterr().err


def test_e2e_with_a_cluster_but_no_helm_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(e2e.shutil, "which", lambda name: None if name == "helm" else name)
    fake = FakeCluster(["quickstart-a"])
    assert e2e.main([], run=fake) == 2
    assert fake.ran == [["kubectl", "cluster-info", "--request-timeout=10s"]]
    assert "helm" in capsys.readouterr().out


def test_notes_say_what_the_readme_says() -> None:
    """Installed as the README installs it, NOTES print the README's quick start commands as
    written (apply, rollout status, get dlock) with nothing to edit; another release prints the
    node URL and namespace to put in the example instead."""
    qs = parse()
    with helm.Chart.load(str(ROOT / qs.chart)) as chart:
        notes = str(chart.render(qs.values, name=qs.release, namespace=qs.release_namespace,
                                 is_install=True)["redlease/templates/NOTES.txt"])  # fmt: skip
        other = str(chart.render(qs.values, name="rl", namespace="ops",
                                 is_install=True)["redlease/templates/NOTES.txt"])  # fmt: skip
    lines = [" ".join(line.split("#")[0].split()) for line in notes.splitlines()]
    for argv in qs.commands:
        if argv[:2] == ["kubectl", "apply"] or argv[1:3] in (["rollout", "status"],
                                                             ["get", "dlock"]):  # fmt: skip
            assert " ".join(argv) in lines, (argv, notes)
    assert "first):" not in notes
    assert "its node URL to redis://rl-redlease-dev-redis.ops.svc:6379/0 first" in " ".join(
        other.split()
    )
