"""The pure injection planner (what the webhook and `redlease inject` both run), case by case."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from redlease.cli import build_parser, parse_args
from redlease.cli.login import SA_DIR, Pod
from redlease.devtools.manifests import restricted_violations, validate_builtin
from redlease.devtools.pods import deployment_container, pod_spec
from redlease.errors import ConfigError
from redlease.kube import sidecar_args
from redlease.operator import injection
from redlease.operator.injection import (
    INJECTED_ANNOTATION,
    LOCK_ANNOTATION,
    READY_ANNOTATION,
    InjectConfig,
    LockLookup,
)
from redlease.operator.injection.plan import (
    LEADER_WARNING,
)

ROOT = Path(__file__).resolve().parents[2]
LOCK = {
    "apiVersion": "redlease.dev/v1alpha1",
    "kind": "DistributedLock",
    "metadata": {"name": "orders", "namespace": "apps"},
    "spec": {
        "keys": ["orders"],
        "nodes": [{"url": "redis://r:6379/0"}],
        "auth": {"secretRef": {"name": "auth", "usernameKey": "user", "passwordKey": "pass"}},
    },
}
FOUND = LockLookup(obj=LOCK)


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "orders-0",
            "annotations": {LOCK_ANNOTATION: "orders"} if annotations is None else annotations,
        },
        "spec": pod_spec(**spec),
    }


def run(
    p: dict[str, Any], lock: LockLookup = FOUND, config: InjectConfig | None = None
) -> tuple[dict[str, Any], injection.Injection]:
    options = injection.read_options(p)
    assert options is not None
    result = injection.plan(p, "apps", options, lock, config or InjectConfig())
    out = result.pod
    # the patch is the difference between the pod given and the pod planned
    assert jsonpatch.apply_patch(p, result.patch) == out
    validate_builtin(out)
    assert restricted_violations(out["spec"]) == []
    return out, result


def sidecar(p: dict[str, Any], kind: str = "initContainers") -> dict[str, Any]:
    (found,) = [c for c in p["spec"].get(kind, []) if c["name"] == injection.SIDECAR_NAME]
    return found


def test_credentials_come_from_the_locks_secret_by_reference() -> None:
    out, result = run(pod())
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in sidecar(out)["env"][2:]}
    assert env == {
        "REDLEASE_USERNAME": {"name": "auth", "key": "user", "optional": True},
        "REDLEASE_PASSWORD": {"name": "auth", "key": "pass"},
    }
    assert result.warnings == []
    # no credentials anywhere else
    assert "env" not in out["spec"]["containers"][0]


def test_lock_without_auth_gets_no_credentials() -> None:
    lock = copy.deepcopy(LOCK)
    del lock["spec"]["auth"]
    out, _ = run(pod(), LockLookup(obj=lock))
    assert [e["name"] for e in sidecar(out)["env"]] == ["POD_NAME", "POD_NAMESPACE"]


def test_a_lock_with_several_holders_is_injected_with_holders() -> None:
    lock = copy.deepcopy(LOCK)
    lock["spec"]["holders"] = 2
    out, result = run(pod(), LockLookup(obj=lock))
    assert result.warnings == []
    assert "--holders=2" in sidecar(out)["args"]
    lock["spec"]["holders"] = 1
    out, result = run(pod(), LockLookup(obj=lock))
    assert result.warnings == []
    assert not any("holders" in a for a in sidecar(out)["args"])  # one holder: no flag


def test_several_holders_and_a_lease_mirror_are_denied() -> None:
    lock = copy.deepcopy(LOCK)
    lock["spec"]["holders"] = 2
    p = pod()
    p["metadata"]["annotations"][injection.LEASE_MIRROR_ANNOTATION] = "true"
    with pytest.raises(ConfigError) as err:
        run(p, LockLookup(obj=lock))
    assert err.value.field == injection.LEASE_MIRROR_ANNOTATION
    assert "spec.holders" in str(err.value)


@pytest.mark.parametrize(
    ("lookup", "problem"),
    [
        (injection.NOT_FOUND, "not found"),
        (LockLookup(error="HTTP 403 Forbidden"), "cannot read"),
        (LockLookup(obj={**LOCK, "spec": {"keys": []}}), "is invalid: spec.keys"),
    ],
    ids=["missing", "unreadable", "invalid"],
)
def test_unusable_lock_warns_or_with_require_lock_denies(lookup: LockLookup, problem: str) -> None:
    _, result = run(pod(), lookup)
    (warning,) = result.warnings
    assert warning.startswith(f"{LOCK_ANNOTATION}: ") and problem in warning
    with pytest.raises(ConfigError) as denied:
        run(pod(), lookup, InjectConfig(require_lock=True))
    assert denied.value.field == LOCK_ANNOTATION and "'orders'" in str(denied.value)


def test_plain_container_mode() -> None:
    out, result = run(pod(), config=InjectConfig(native=False))
    assert "initContainers" not in out["spec"]
    side = sidecar(out, "containers")
    assert "restartPolicy" not in side and result.warnings == []
    _, job = run(pod(restartPolicy="Never"), config=InjectConfig(native=False))
    assert [w.split(":")[0] for w in job.warnings] == ["spec.restartPolicy"]


def test_leader_readiness_starts_on_healthz() -> None:
    out, _ = run(pod({LOCK_ANNOTATION: "orders", READY_ANNOTATION: "leader"}))
    side = sidecar(out)
    assert side["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert side["readinessProbe"]["httpGet"]["path"] == "/readyz"
    default = sidecar(run(pod())[0])
    assert default["startupProbe"]["httpGet"]["path"] == "/readyz"


def test_config_reaches_the_container() -> None:
    config = InjectConfig(
        image="registry.example/rl:2", pull_policy="Always", resources={"limits": {"cpu": "1"}}
    )
    side = sidecar(run(pod(), config=config)[0])
    assert side["image"] == "registry.example/rl:2" and side["imagePullPolicy"] == "Always"
    assert side["resources"] == {"limits": {"cpu": "1"}}


def test_existing_sidecar_container_is_left_alone() -> None:
    existing = pod(initContainers=[{"name": injection.SIDECAR_NAME, "image": "mine"}])
    options = injection.read_options(existing)
    assert options is not None
    result = injection.plan(existing, "apps", options, FOUND, InjectConfig())
    assert result.patch == [] and "already has a container" in result.warnings[0]
    existing["metadata"]["annotations"][INJECTED_ANNOTATION] = "0.1.0"
    again = injection.plan(existing, "apps", options, FOUND, InjectConfig())
    assert again.pod == existing and again.patch == [] and again.warnings == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"volumes": [{"name": injection.STATE_VOLUME, "emptyDir": {}}]}, "spec.volumes"),
        ({"hostNetwork": True}, "spec.hostNetwork"),
    ],
)
def test_pods_the_sidecar_cannot_work_in_are_denied(spec: dict[str, Any], field: str) -> None:
    p = pod(**spec)
    options = injection.read_options(p)
    assert options is not None
    with pytest.raises(ConfigError) as denied:
        injection.plan(p, "apps", options, FOUND, InjectConfig())
    assert denied.value.field == field


def test_app_that_mounts_the_state_dir_itself_is_not_touched() -> None:
    p = pod()
    p["spec"]["volumes"] = [{"name": "mine", "emptyDir": {}}]
    p["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "mine", "mountPath": injection.STATE_DIR}
    ]
    out, result = run(p)
    assert out["spec"]["containers"][0] == p["spec"]["containers"][0]
    assert result.warnings[0].startswith("spec.containers[0]")


def test_opt_out_and_case() -> None:
    assert injection.read_options(pod({})) is None
    assert (
        injection.read_options(pod({LOCK_ANNOTATION: "x", injection.INJECT_ANNOTATION: "False"}))
        is None
    )
    assert injection.read_options(pod({LOCK_ANNOTATION: "x", injection.INJECT_ANNOTATION: "TRUE"}))


# --- the injector's constants are the sidecar's defaults ------------------------------------


def test_constants_match_the_sidecar() -> None:
    assert injection.KUBE_API_DIR == SA_DIR == sidecar_args.SERVICE_ACCOUNT_DIR
    sub = build_parser()._subparsers._group_actions[0].choices["sidecar"]  # type: ignore[union-attr]
    defaults = {a.dest: a.default for a in sub._actions}
    assert defaults["state_dir"] == injection.STATE_DIR == sidecar_args.STATE_DIR
    assert defaults["http"] == sidecar_args.DEFAULT_HTTP
    assert f"USER {injection.SIDECAR_USER}:" in (ROOT / "Dockerfile").read_text()
    chart = yaml.safe_load((ROOT / "charts/redlease/Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "charts/redlease/values.yaml").read_text())
    assert f"{values['image']['repository']}:{chart['appVersion']}" == injection.DEFAULT_IMAGE
    assert values["injection"]["sidecarResources"] == dict(injection.DEFAULT_RESOURCES)


TLS_LOCK = {
    **LOCK,
    "spec": {
        "keys": ["orders"],
        "nodes": [{"url": f"rediss://r{i}:6379/0"} for i in range(3)],
        "auth": {"secretRef": {"name": "auth"}},
        "tls": {"caSecretRef": {"name": "ca"}, "clientCertSecretRef": {"name": "client"}},
    },
}
EVERY_OPTION = {
    LOCK_ANNOTATION: "orders",
    READY_ANNOTATION: "leader",
    injection.HTTP_PORT_ANNOTATION: "4141",
    injection.METRICS_PORT_ANNOTATION: "9100",
    injection.POD_LABEL_ANNOTATION: "true",
    injection.LEASE_MIRROR_ANNOTATION: "true",
    injection.EVENTS_ANNOTATION: "true",
    injection.API_LOCKS_ANNOTATION: "jobs/",
    injection.DRAIN_TIMEOUT_ANNOTATION: "1m30s",
}


def test_every_injected_argument_parses_into_the_config_the_pod_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sidecar's arguments as injected go through `redlease sidecar`'s own parser and
    config builder: every flag exists, and the config is what the annotations asked for."""
    from redlease.cli.sidecar import sidecar_config

    out, result = run(
        pod(EVERY_OPTION, terminationGracePeriodSeconds=120), LockLookup(obj=TLS_LOCK)
    )
    assert result.warnings == [LEADER_WARNING]
    sidecar = next(c for c in out["spec"]["initContainers"] if c["name"] == "redlease")
    # the TLS files where the Secret volumes put them, under tmp_path instead of TLS_DIR
    volumes = {v["name"]: v for v in out["spec"]["volumes"]}
    for mount in sidecar["volumeMounts"]:
        if mount["mountPath"].startswith(injection.TLS_DIR):
            for item in volumes[mount["name"]]["secret"]["items"]:
                local = tmp_path / mount["mountPath"].removeprefix(injection.TLS_DIR + "/")
                local.mkdir(parents=True, exist_ok=True)
                (local / item["path"]).write_text("PEM")
    args = [a.replace(injection.TLS_DIR, str(tmp_path)) for a in sidecar["args"]]
    for name in ("REDLEASE_PASSWORD", "REDLEASE_USERNAME", "REDLEASE_REDIS", "REDLEASE_LOCK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POD_NAME", "orders-0")

    config = sidecar_config(parse_args(args), Pod(name="orders-0", namespace="apps"))

    assert config.lock_ref is not None
    assert (config.lock_ref.namespace, config.lock_ref.name) == ("apps", "orders")
    assert config.lock_ref.pinned_nodes == {f"rediss://r{i}:6379/0" for i in range(3)}
    assert config.lock_ref.tls is not None
    assert config.lock_ref.tls.ca_file == str(tmp_path / "ca/ca.crt")
    assert config.lock_ref.tls.cert_file == str(tmp_path / "client/tls.crt")
    assert config.lock_ref.tls.key_file == str(tmp_path / "client/tls.key")
    assert (str(config.http), str(config.metrics)) == ("127.0.0.1:4141", "0.0.0.0:9100")
    assert config.state_dir == Path(sidecar_args.STATE_DIR)
    assert config.ready == "leader"
    assert config.pod_label and config.lease_mirror and config.events
    assert config.api_locks == "jobs/" and config.drain_timeout == 90.0
    assert config.identity == "orders-0"
    # the environment the container sets is what the CLI reads
    env = {e["name"] for e in sidecar["env"]}
    assert {sidecar_args.env_name("--password"), sidecar_args.env_name("--username")} <= env
    assert {sidecar_args.POD_NAME_ENV, sidecar_args.POD_NAMESPACE_ENV} <= env


def test_a_plain_pod_gets_the_sidecars_defaults() -> None:
    """Nothing asked for: the injected flags equal the parser's defaults, and nothing more."""
    out, _ = run(pod(), LockLookup(obj={**LOCK, "spec": {**LOCK["spec"], "auth": None}}))
    sidecar = next(c for c in out["spec"]["initContainers"] if c["name"] == "redlease")
    written = {arg.partition("=")[0] for arg in sidecar["args"][1:]}
    assert written == {
        sidecar_args.LOCK_REF,
        sidecar_args.READY,
        sidecar_args.HTTP,
        sidecar_args.PROBES,
        sidecar_args.STATE_DIR_FLAG,
    }
    parsed = vars(build_parser().parse_args(sidecar["args"]))
    defaults = vars(build_parser().parse_args(["sidecar"]))
    # the probe-only listener is off unless asked for: the injection asks (httpGet probes)
    assert {k for k, v in parsed.items() if v != defaults[k]} == {"lock_ref", "probes"}


def test_probes_are_httpget_on_the_probe_port_and_ports_do_not_collide() -> None:
    out, result = run(pod({LOCK_ANNOTATION: "orders", injection.PROBE_PORT_ANNOTATION: "5050"}))
    container = sidecar(out)
    assert "--probes=0.0.0.0:5050" in container["args"] and result.warnings == []
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == 5050 and "exec" not in container[probe]
    cases = (("4040", "http port"), ("9464", "metrics port"), ("80", "1024"), ("x", "port number"))
    for bad, why in cases:
        asked = {LOCK_ANNOTATION: "orders", injection.METRICS_PORT_ANNOTATION: "9464"}
        with pytest.raises(ConfigError, match=why) as info:
            injection.read_options(pod({**asked, injection.PROBE_PORT_ANNOTATION: bad}))
        assert info.value.field == injection.PROBE_PORT_ANNOTATION
    taken = pod()
    taken["spec"]["containers"][0]["ports"] = [{"containerPort": 4041}]
    with pytest.raises(ConfigError) as info:
        run(taken)
    assert info.value.field == injection.PROBE_PORT_ANNOTATION


def test_lease_mirror_and_events_are_opt_in_by_annotation() -> None:
    out, _ = run(pod())
    assert not {"--lease-mirror", "--events"} & set(sidecar(out)["args"])
    asked = {
        LOCK_ANNOTATION: "orders",
        injection.LEASE_MIRROR_ANNOTATION: "true",
        injection.EVENTS_ANNOTATION: "true",
    }
    out, result = run(pod(asked))
    assert {"--lease-mirror", "--events"} <= set(sidecar(out)["args"]) and result.warnings == []
    with pytest.raises(ConfigError) as bad:
        injection.read_options(pod({LOCK_ANNOTATION: "orders", injection.EVENTS_ANNOTATION: "yes"}))
    assert bad.value.field == injection.EVENTS_ANNOTATION


def test_metrics_port_serves_metrics_alone_on_a_named_port() -> None:
    asked = {LOCK_ANNOTATION: "orders", injection.METRICS_PORT_ANNOTATION: "9464"}
    out, result = run(pod(asked))
    container = sidecar(out)
    assert "--metrics=0.0.0.0:9464" in container["args"] and result.warnings == []
    assert container["ports"] == [
        {"name": injection.METRICS_PORT_NAME, "containerPort": 9464, "protocol": "TCP"}
    ]
    for bad in ("4040", "80", "x"):
        with pytest.raises(ConfigError) as info:
            injection.read_options(
                pod({LOCK_ANNOTATION: "orders", injection.METRICS_PORT_ANNOTATION: bad})
            )
        assert info.value.field == injection.METRICS_PORT_ANNOTATION


SENTINEL_URL = "redis+sentinel://s1:26379,s2:26379/mymaster"


def sentinel_lookup(allowed: str | None) -> LockLookup:
    lock = {**LOCK, "spec": {**LOCK["spec"], "nodes": [{"url": SENTINEL_URL}]}}
    meta: dict[str, Any] = {"name": "auth", "labels": {"redlease.dev/credentials": "true"}}
    if allowed is not None:
        meta["annotations"] = {"redlease.dev/allowed-nodes": allowed}
    return LockLookup(obj=lock).with_secrets({"auth": {"metadata": meta, "data": {}}})


@pytest.mark.parametrize(
    ("allowed", "masters", "wired"),
    [
        (f"{SENTINEL_URL}, redis://10.0.0.7:6379, redis://10.0.0.8:6379",
         ["redis://10.0.0.7:6379", "redis://10.0.0.8:6379"], True),
        (None, [], True),  # no allowed list: the masters are not checked (as in the operator)
        (SENTINEL_URL, [], False),  # a list that allows no master: nothing can be reached
    ],
    ids=["listed", "no-list", "no-master"],
)  # fmt: skip
def test_a_sentinel_lock_tells_the_sidecar_which_masters_it_may_use(
    allowed: str | None, masters: list[str], wired: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An injected sidecar gets its credentials from its environment and never reads the
    Secret, so the injector writes the masters the Secret allows (``--allowed-master``), and
    the CLI turns them into the sidecar's pin."""
    from redlease.cli.sidecar import sidecar_config

    out, result = run(pod(), sentinel_lookup(allowed))
    args = sidecar(out)["args"]
    assert [a.partition("=")[2] for a in args if a.startswith("--allowed-master=")] == masters
    assert (f"--pinned-node={SENTINEL_URL}" in args) is wired
    assert (result.warnings == []) is wired
    for name in ("REDLEASE_ALLOWED_MASTER", "REDLEASE_PINNED_NODE"):
        monkeypatch.delenv(name, raising=False)
    config = sidecar_config(parse_args(args), Pod(name="orders-0", namespace="apps"))
    assert config.lock_ref is not None and config.lock_ref.allowed_masters == set(masters)


def test_allowed_master_takes_node_urls_only() -> None:
    from redlease.cli.sidecar import sidecar_config

    for bad in ("sentinel:mymaster", "redis+sentinel://s1:26379/m"):
        parsed = parse_args(["sidecar", "--lock-ref=orders", f"--allowed-master={bad}"])
        with pytest.raises(ConfigError, match="--allowed-master"):
            sidecar_config(parsed, Pod(name="orders-0", namespace="apps"))


def test_dapr_port_sets_dapr_http_port_in_the_app_containers() -> None:
    """``redlease.dev/dapr-port: "true"``: Dapr's SDKs in the app containers find the sidecar's
    Dapr routes (DAPR_HTTP_PORT = the sidecar's http port); a container that sets it keeps its
    own; without the lock API the annotation is refused; without the annotation nothing."""
    asked = {
        LOCK_ANNOTATION: "orders",
        injection.API_LOCKS_ANNOTATION: "jobs/",
        injection.DAPR_PORT_ANNOTATION: "true",
        injection.HTTP_PORT_ANNOTATION: "4141",
    }
    p = pod(asked)
    p["spec"]["containers"].append(
        deployment_container("own", env=[{"name": "DAPR_HTTP_PORT", "value": "3500"}])
    )
    out, result = run(p)
    app, own = out["spec"]["containers"][0], out["spec"]["containers"][-1]
    assert {"name": "DAPR_HTTP_PORT", "value": "4141"} in app["env"]
    assert own["env"] == [{"name": "DAPR_HTTP_PORT", "value": "3500"}]
    assert [w for w in result.warnings if "DAPR_HTTP_PORT" in w] and len(result.warnings) == 1
    assert "--http=127.0.0.1:4141" in sidecar(out)["args"]
    assert not [e for e in sidecar(out).get("env", []) if e["name"] == "DAPR_HTTP_PORT"]
    plain, _ = run(pod({LOCK_ANNOTATION: "orders", injection.API_LOCKS_ANNOTATION: "jobs/"}))
    assert "DAPR_HTTP_PORT" not in str(plain["spec"]["containers"][0])
    with pytest.raises(ConfigError) as bad:
        injection.read_options(
            pod({LOCK_ANNOTATION: "orders", injection.DAPR_PORT_ANNOTATION: "true"})
        )
    assert bad.value.field == injection.DAPR_PORT_ANNOTATION
