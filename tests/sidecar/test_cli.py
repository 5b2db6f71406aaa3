"""Bad flags and env vars: one line naming the flag, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from redlease.cli import main
from redlease.devtools.sidecarprocs import ROOT, env

BASE = ["sidecar", "--lock", "x", "--redis", "redis://127.0.0.1:1/0", "--http", "off"]
KUBE = ["sidecar", "--redis", "redis://127.0.0.1:1/0", "--http", "off", "--state-dir", "",
        "--kube-api", "https://kube.invalid"]  # fmt: skip


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        ([*BASE, "--ttl", "abc"], {}, "--ttl"),
        ([*BASE, "--ttl", "-1"], {}, "--ttl"),
        ([*BASE, "--renew-deadline", "20"], {}, "--renew-deadline"),
        ([*BASE, "--retry-period", "12"], {}, "--retry-period"),
        (BASE, {"REDLEASE_TTL": "abc"}, "REDLEASE_TTL (for --ttl)"),
        (BASE, {"REDLEASE_PAUSED": "maybe"}, "--paused"),
        (BASE, {"REDLEASE_READY": "sometimes"}, "--ready"),
        (["sidecar", "--redis", "redis://h"], {}, "--lock"),
        (["sidecar", "--lock", "a{b}", "--redis", "redis://h"], {}, "--lock"),
        (["sidecar", "--lock", "x", "--redis", "http://h"], {}, "--redis"),
        (["sidecar", "--lock", "x"], {}, "--redis"),
        ([*BASE, "--http", "127.0.0.1:99999"], {}, "--http"),
        ([*BASE, "--http", "127.0.0.1:²⁰⁴⁸"], {}, "--http"),
        ([*BASE, "--http", "127.0.0.1:٤٠٤٠"], {}, "--http"),
        (
            ["sidecar", "--lock", "x", "--redis", "redis://h:1/0?health_check_interval=²"],
            {},
            "URL option health_check_interval='²': expected an integer >= 0",
        ),
        (
            ["sidecar", "--lock", "x", "--redis", "redis+sentinel://h:²⁶³⁷⁹/m"],
            {},
            "bad Sentinel address",
        ),
        ([*BASE, "--pinned-node", "redis://h:1/0"], {}, "--pinned-node: needs --lock-ref"),
        (
            [
                "sidecar",
                "--lock-ref",
                "x",
                "--pinned-node",
                "redis://u:pw@h:1/0",
                "--kube-api",
                "https://k",
            ],
            {"POD_NAMESPACE": "apps"},
            "--pinned-node",
        ),
        ([*BASE, "--quorum", "2"], {}, "--quorum"),
        ([*BASE, "--bogus"], {}, "--bogus"),
        (["run", "--lock", "x", "--redis", "redis://h"], {}, "COMMAND"),
        (["wait"], {}, "--state-file"),
        (["wait", "--state-dir", "/tmp"], {}, "--lock"),
        (["sidecar", "--lock-ref", "x", "--lock", "y", "--kube-api", "https://k"], {}, "--lock"),
        (["sidecar", "--lock-ref=x", "--kube-api=http://10.1.1.1"], {}, "--kube-api"),
        (["sidecar", "--lock-ref", "Bad_Name", "--kube-api", "https://k"], {}, "--lock-ref"),
        ([*BASE, "--identity", "has space"], {}, "--identity"),
        ([*BASE, "--identity", "esc\x1b[31m"], {}, "--identity"),
        (
            [*KUBE, "--lock", "Not_A_Name", "--lease-mirror"],
            {"POD_NAMESPACE": "apps"},
            "--lease-mirror",
        ),
        ([*KUBE, "--lock", "x", "--events"], {}, "--events: needs the POD_NAMESPACE"),
        ([*BASE, "--holders", "0"], {}, "--holders: must be an integer from 1 to 64"),
        ([*BASE, "--holders", "65"], {}, "--holders: must be an integer from 1 to 64"),
        ([*BASE, "--holders", "two"], {}, "--holders"),
        (BASE, {"REDLEASE_HOLDERS": "x"}, "REDLEASE_HOLDERS (for --holders)"),
        (
            [*KUBE, "--lock", "x", "--lease-mirror", "--holders", "2"],
            {"POD_NAMESPACE": "apps"},
            "--lease-mirror: a Lease names one holder: it cannot mirror --holders = 2",
        ),
        ([*BASE, "--replicas", "-1"], {}, "--replicas"),
        ([*BASE, "--replicas", "one"], {}, "--replicas"),
        ([*BASE, "--replica-timeout", "0"], {}, "--replica-timeout"),
        (BASE, {"REDLEASE_REPLICAS": "-2"}, "REDLEASE_REPLICAS (for --replicas)"),
        (
            ["run", "--lock", "x", "--redis", "redis://h", "--replicas", "x", "--", "true"],
            {},
            "--replicas",
        ),
        (
            ["sidecar", "--lock-ref", "x", "--replicas", "1", "--kube-api", "https://k"],
            {},
            "--replicas: cannot be combined with --lock-ref",
        ),
        ([*BASE, "--strict-restart"], {}, "--strict-restart: applies to a RedLock set"),
        (BASE, {"REDLEASE_STRICT_RESTART": "maybe"}, "REDLEASE_STRICT_RESTART"),
        (
            ["sidecar", "--lock-ref", "x", "--strict-restart", "--kube-api", "https://k"],
            {},
            "--strict-restart: cannot be combined with --lock-ref",
        ),
        (
            [
                "sidecar",
                "--lock",
                "x",
                "--redis",
                "redis://h:1",
                "--redis",
                "redis://h:2",
                "--redis",
                "redis://h:3",
                "--cluster",
                "--strict-restart",
            ],
            {},
            "--strict-restart: applies to a RedLock set",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(
    argv: list[str],
    environ: dict[str, str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert named in err and "Traceback" not in err


def test_env_vars_fill_flags_and_flags_win(monkeypatch: pytest.MonkeyPatch) -> None:
    from redlease import cli

    monkeypatch.setenv("REDLEASE_TTL", "30")
    monkeypatch.setenv("REDLEASE_REDIS", "redis://a:1/0, redis://b:2/0,redis://c:3/0")
    monkeypatch.setenv("REDLEASE_PAUSED", "true")
    args = cli.parse_args(["sidecar", "--lock", "x", "--ttl", "9"])
    assert args.ttl == 9.0 and args.paused is True
    assert args.redis == ["redis://a:1/0", "redis://b:2/0", "redis://c:3/0"]
    assert args.http == "127.0.0.1:4040" and args.state_dir == "/var/run/redlease"


@pytest.mark.parametrize("command", ["sidecar", "run", "status"])
def test_strict_restart_from_flag_and_env(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--strict-restart`` (or REDLEASE_STRICT_RESTART) reaches the node set the command
    connects (the lock view reads its reasons in the same mode); off by default."""
    from redlease import cli
    from redlease.cli import flags
    from redlease.core.connect import connect_target

    three = [x for i in range(3) for x in ("--redis", f"redis://127.0.0.1:{i + 1}/0")]
    tail = ["--", "true"] if command == "run" else []
    args = cli.parse_args([command, "--lock", "x", *three, *tail])
    assert not flags.target(args).strict_restart
    ns = connect_target(flags.target(args))
    assert ns.strict_restart is False
    args = cli.parse_args([command, "--lock", "x", *three, "--strict-restart", *tail])
    assert flags.target(args).strict_restart
    assert connect_target(flags.target(args)).strict_restart is True
    monkeypatch.setenv("REDLEASE_STRICT_RESTART", "true")
    args = cli.parse_args([command, "--lock", "x", *three, *tail])
    assert connect_target(flags.target(args)).strict_restart is True


@pytest.mark.parametrize("command", ["sidecar", "run"])
def test_replicas_from_flags_env_and_spec(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--replicas``/``--replica-timeout`` (or REDLEASE_REPLICAS) reach the election the
    sidecar and `redlease run` hold; a DistributedLock's ``spec.replicas`` does the same."""
    from redlease import cli
    from redlease.cli import flags
    from redlease.core.primitives import DEFAULT_REPLICA_TIMEOUT
    from redlease.kube.spec import parse_spec
    from redlease.sidecar.config import election_from_spec

    argv = [command, "--lock", "x", "--redis", "redis+sentinel://s1:1,s2:2/m"]
    default = flags.election_config(cli.parse_args(argv))
    assert (default.replicas, default.replica_timeout) == (0, DEFAULT_REPLICA_TIMEOUT)

    monkeypatch.setenv("REDLEASE_REPLICAS", "2")
    election = flags.election_config(cli.parse_args([*argv, "--replica-timeout", "0.5"]))
    assert (election.replicas, election.replica_timeout) == (2, 0.5)
    args = cli.parse_args([*argv, "--replicas", "1"])  # the flag wins over the env var
    assert flags.election_config(args).replicas == 1

    spec = parse_spec({"keys": ["x"], "nodes": [{"url": "redis://r:1"}], "replicas": 1})
    from_spec = election_from_spec(spec, "pod-0", replica_timeout=0.3)
    assert (from_spec.replicas, from_spec.replica_timeout) == (1, 0.3)


def test_real_process_bad_state_dir_and_env() -> None:
    cmd = [sys.executable, "-m", "redlease", *BASE, "--state-dir", "/proc/redlease-no"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=30)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--state-dir" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "redlease", "sidecar"],
        capture_output=True,
        text=True,
        env=env(REDLEASE_LOCK="x", REDLEASE_REDIS="redis://h", REDLEASE_RETRY_PERIOD="0"),
        cwd=ROOT,
        timeout=30,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--retry-period" in out.stderr


def test_holders_from_flags_env_and_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--holders`` (or REDLEASE_HOLDERS) reaches the sidecar's election, default 1; a
    DistributedLock's ``spec.holders`` does the same; several keys with several holders are
    refused naming the field."""
    from redlease import cli
    from redlease.cli.login import Pod
    from redlease.cli.sidecar import sidecar_config
    from redlease.errors import ConfigError
    from redlease.kube.spec import parse_spec
    from redlease.sidecar.config import check_holders, election_from_spec

    def holders(argv: list[str]) -> int:
        config = sidecar_config(cli.parse_args(argv), Pod(None, None))
        assert config.election is not None
        return config.election.holders

    assert holders(BASE) == 1
    assert holders([*BASE, "--holders", "3"]) == 3
    monkeypatch.setenv("REDLEASE_HOLDERS", "2")
    assert holders(BASE) == 2
    assert holders([*BASE, "--holders", "4"]) == 4  # the flag wins over the env var

    spec = parse_spec({"keys": ["x"], "nodes": [{"url": "redis://r:1"}], "holders": 2})
    assert election_from_spec(spec, "pod-0").holders == 2
    with pytest.raises(ConfigError, match="--holders: more than 1 holder needs exactly one key"):
        check_holders(2, ("a", "b"), "--holders")
    assert check_holders(1, ("a", "b"), "--holders") == 1
