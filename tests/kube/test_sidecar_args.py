"""The sidecar's command line declared once (kube/sidecar_args.py): every flag it names is one of
`redlease sidecar`'s, and the environment fallback uses its env names."""

from __future__ import annotations

import pytest

from redlease.cli import build_parser, parse_args
from redlease.kube import sidecar_args as sa

FLAGS = (
    sa.LOCK_REF, sa.PINNED_NODE, sa.READY, sa.HTTP, sa.METRICS, sa.STATE_DIR_FLAG, sa.POD_LABEL,
    sa.LEASE_MIRROR, sa.EVENTS, sa.TLS_CA_FILE_FLAG, sa.TLS_CERT_FILE_FLAG, sa.TLS_KEY_FILE_FLAG,
)  # fmt: skip


def sidecar_options() -> set[str]:
    sub = build_parser()._subparsers._group_actions[0].choices[sa.COMMAND]  # type: ignore[union-attr]
    return {flag for action in sub._actions for flag in action.option_strings}


def test_every_declared_flag_is_a_sidecar_flag() -> None:
    assert set(FLAGS) <= sidecar_options()


def test_argv_with_everything_uses_only_declared_flags() -> None:
    argv = sa.SidecarArgs(
        lock_ref="orders",
        ready="leader",
        http_port=4141,
        pinned_nodes=("redis://r0:6379",),
        pod_label=True,
        lease_mirror=True,
        events=True,
        metrics_port=9100,
        tls_ca=True,
        tls_client=True,
    ).argv()
    assert argv[0] == sa.COMMAND
    assert {a.partition("=")[0] for a in argv[1:]} == set(FLAGS)


def test_env_names_are_the_cli_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sa.env_name(sa.STATE_DIR_FLAG), "/tmp/elsewhere")
    monkeypatch.setenv(sa.env_name(sa.HTTP), "127.0.0.1:4242")
    args = parse_args([sa.COMMAND])
    assert (args.state_dir, args.http) == ("/tmp/elsewhere", "127.0.0.1:4242")
    assert sa.env_name("--password") == sa.PASSWORD_ENV
    assert sa.env_name("--username") == sa.USERNAME_ENV
