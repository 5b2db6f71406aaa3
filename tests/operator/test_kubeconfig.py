"""The operator reaches the API server with the credentials and TLS of its login.

The login (in-cluster ``ClusterAuth``, or a kubeconfig's current context loaded by the
``kubernetes`` client's loader) is the one source for the operator's API client and for kopf's
login: the service-account token is read again on every request (bound tokens rotate); the CA,
the client certificate and insecure-skip-tls-verify carry over; a kubeconfig it cannot use is
one line on KUBECONFIG. Exec plugins and token refresh: tests/kube/test_credentials.py.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest

from redlease.errors import ConfigError
from redlease.kube.auth import ClusterAuth, in_cluster
from redlease.kube.credentials import from_kubeconfig
from redlease.operator.handlers import connection_info

trustme = pytest.importorskip("trustme")


def test_the_service_account_token_is_read_on_every_request(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one\n")
    (tmp_path / "namespace").write_text("ops")
    auth = in_cluster("https://10.0.0.1:443/", tmp_path)
    assert auth.base_url() == "https://10.0.0.1:443" and auth.namespace == "ops"
    assert auth.credentials() == {"Authorization": "Bearer one"}
    (tmp_path / "token").write_text("two\n")  # the kubelet rotated it
    assert auth.credentials() == {"Authorization": "Bearer two"}
    assert connection_info(auth).token == "two"  # kopf's next login reads it too
    assert auth.user_agent().startswith("redlease-operator/")
    assert ClusterAuth("https://x").credentials() == {}


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_a_kubeconfig_context_with_ca_and_client_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    cert = ca.issue_cert("operator")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: kind\n"
        "contexts: [{name: kind, context: {cluster: c, user: u, namespace: apps}}]\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:6443', "
        f"certificate-authority-data: {_b64(ca_file)}}}}}]\n"
        f"users: [{{name: u, user: {{client-certificate-data: {_b64(cert_file)}, "
        f"client-key-data: {_b64(key_file)}}}}}]\n"
    )
    auth = from_kubeconfig([config])
    assert auth.base_url() == "https://127.0.0.1:6443" and auth.namespace == "apps"
    assert auth.credentials() == {}  # the client certificate authenticates
    context = auth.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == 1  # the kubeconfig's CA, not the system's
    info = connection_info(auth)
    # kopf gets the same CA and client certificate (the loader's files)
    assert info.ca_path and Path(info.ca_path).read_bytes() == ca.cert_pem.bytes()
    assert info.certificate_path and Path(info.certificate_path).read_bytes() == (
        cert.cert_chain_pems[0].bytes()
    )
    assert info.private_key_path and info.default_namespace == "apps"

    loose = ClusterAuth("https://api.example", insecure=True).ssl_context()
    assert isinstance(loose, ssl.SSLContext)
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    assert ClusterAuth("http://127.0.0.1:8001").ssl_context() is False


def test_the_first_kubeconfig_naming_an_entry_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    (tmp_path / "t").write_text("from-file\n")
    first.write_text(
        f"current-context: x\nusers: [{{name: u, user: {{tokenFile: {tmp_path}/t}}}}]\n"
    )
    second.write_text(
        "current-context: y\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:8001'}}]\n"
        "users: [{name: u, user: {token: other}}]\n"
    )
    auth = from_kubeconfig([first, second])
    assert auth.base_url() == "http://127.0.0.1:8001"
    assert auth.credentials() == {"Authorization": "Bearer from-file"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Config\n", "current-context"),
        ("current-context: gone\n", "gone"),
        ("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n",
         "cluster"),
        ("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
         "clusters: [{name: c, cluster: {server: 'https://k'}}]\n"
         "users: [{name: u, user: {exec: {command: aws}}}]\n", "exec plugin gave no credentials"),
        ("- a list\n", "cannot use the kubeconfig"),
        ("current-context: x\n  bad: [\n", "cannot use the kubeconfig"),
        ("", "cannot use the kubeconfig"),
    ],
)  # fmt: skip
def test_a_kubeconfig_it_cannot_use_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "config"
    config.write_text(text)
    with pytest.raises(ConfigError) as info:
        from_kubeconfig([config])
    assert info.value.field == "KUBECONFIG" and message in info.value.message
