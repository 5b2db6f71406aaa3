"""Who a command is to the Kubernetes API: this pod read once, one login type
(``ClusterAuth``) for the sidecar and the operator, the command's identity in the user agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from redlease.cli import login
from redlease.errors import ConfigError


@pytest.fixture
def sa_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "token").write_text("one\n")
    (tmp_path / "namespace").write_text("ops")
    monkeypatch.setattr(login, "SA_DIR", str(tmp_path))
    for name in ("POD_NAME", "POD_NAMESPACE", "KUBERNETES_SERVICE_HOST", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_this_pod_prefers_the_downward_api(sa_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert login.this_pod() == login.Pod(name=None, namespace="ops")
    monkeypatch.setenv("POD_NAME", "orders-0")
    monkeypatch.setenv("POD_NAMESPACE", "apps")
    assert login.this_pod() == login.Pod(name="orders-0", namespace="apps")


def test_the_sidecar_sends_the_rotating_token_over_https_only(sa_dir: Path) -> None:
    pod = login.Pod("orders-0", "apps")
    auth = login.sidecar_login("https://10.0.0.1:443", pod, "orders-0")
    assert auth is not None and auth.namespace == "apps"
    assert auth.credentials() == {"Authorization": "Bearer one"}
    (sa_dir / "token").write_text("two\n")  # the kubelet rotated it
    assert auth.credentials() == {"Authorization": "Bearer two"}
    assert auth.user_agent().startswith("redlease-sidecar/") and "(orders-0)" in auth.user_agent()

    proxy = login.sidecar_login("http://127.0.0.1:8001", pod, "orders-0")
    assert proxy is not None and proxy.credentials() == {} and proxy.ssl_context() is False
    with pytest.raises(ConfigError, match="--kube-api"):
        login.sidecar_login("http://10.1.1.1", pod, "orders-0")


def test_the_sidecar_without_an_api_says_so_when_it_needs_one(sa_dir: Path) -> None:
    from redlease.kube.auth import required

    assert login.sidecar_login(None, login.Pod(), "x") is None
    with pytest.raises(ConfigError, match="--kube-api: no Kubernetes API"):
        required(None)


def test_the_operator_logs_in_with_its_identity(
    sa_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    auth = login.operator_login(login.this_pod(), "op-1")
    assert auth.base_url() == "https://10.0.0.1:443" and auth.namespace == "ops"
    assert auth.user_agent().startswith("redlease-operator/") and "(op-1)" in auth.user_agent()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    monkeypatch.setenv("KUBECONFIG", str(sa_dir / "missing"))
    with pytest.raises(ConfigError, match="no Kubernetes API"):
        login.operator_login(login.Pod(), "op-1")
