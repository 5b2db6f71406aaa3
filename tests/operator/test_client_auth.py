"""The operator reaches its Lease with the credentials and TLS of its ``kubernetes`` client.

``ClientAuth`` adapts a real ``kubernetes.client.Configuration`` (what in-cluster config or a
kubeconfig loads) for the asyncio client: the token is asked for on every request, so a
refreshed one (the in-cluster loader's hook re-reads the rotating file) is the one sent; the CA,
the client certificate and insecure-skip-tls-verify carry over.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from redlease.operator.runner import ClientAuth

trustme = pytest.importorskip("trustme")


def configuration(host: str, **values: Any) -> Any:
    conf = kubernetes.client.Configuration()
    conf.host = host
    for key, value in values.items():
        setattr(conf, key, value)
    return conf


def test_the_token_is_asked_for_on_every_request() -> None:
    conf = configuration("https://api.example:6443/", api_key={"authorization": "Bearer one"})
    auth = ClientAuth(conf, "replica-a")
    assert auth.base_url() == "https://api.example:6443"
    assert auth.credentials() == {"Authorization": "Bearer one"}

    def refresh(c: Any) -> None:
        c.api_key["authorization"] = "Bearer two"

    conf.refresh_api_key_hook = refresh
    assert auth.credentials() == {"Authorization": "Bearer two"}
    assert auth.user_agent().startswith("redlease-operator/")
    assert auth.user_agent().endswith("(replica-a)")
    assert ClientAuth(configuration("https://x"), "r").credentials() == {}


def test_tls_settings_carry_over(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    cert = ca.issue_cert("replica-a")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))

    conf = configuration(
        "https://api.example", ssl_ca_cert=str(ca_file), cert_file=str(cert_file),
        key_file=str(key_file),
    )  # fmt: skip
    context = ClientAuth(conf, "r").ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert len(context.get_ca_certs()) == 1  # the kubeconfig's CA, not the system's

    conf.verify_ssl = False
    loose = ClientAuth(conf, "r").ssl_context()
    assert isinstance(loose, ssl.SSLContext)
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    assert ClientAuth(configuration("http://127.0.0.1:8001"), "r").ssl_context() is False
