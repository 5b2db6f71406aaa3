"""The API token (``--api-token-file``): refused start off loopback without one, 401 without or
with a wrong token, 200 with ``Authorization: Bearer`` or Dapr's ``dapr-api-token``; probes and
views stay open. Real sidecar processes on a real redis-server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.sidecarprocs import ROOT, Sidecar, env
from redlease.errors import ConfigError
from redlease.sidecar import apiauth
from tests.sidecar.test_dapr import LOCK, call

TOKEN = "s3cret-token-0123456789abcdef"


def test_loopback_rule() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert apiauth.is_loopback(host), host
    for host in ("0.0.0.0", "::", "10.0.0.5", "pod.example", ""):  # noqa: S104
        assert not apiauth.is_loopback(host), host


def test_exposure_needs_a_token_off_loopback() -> None:
    on = {"--api-locks": True, "--drain-timeout": False}
    apiauth.check_exposure("127.0.0.1", on, None)
    apiauth.check_exposure("0.0.0.0", on, TOKEN)  # noqa: S104
    apiauth.check_exposure("0.0.0.0", {"--api-locks": False}, None)  # noqa: S104 - status only
    apiauth.check_exposure(None, on, None)
    with pytest.raises(ConfigError) as info:
        apiauth.check_exposure("0.0.0.0", {"--drain-timeout": True}, None)  # noqa: S104
    assert info.value.field == "--api-token-file"
    assert "--drain-timeout" in info.value.message


def test_token_file(tmp_path: Path) -> None:
    good = tmp_path / "token"
    good.write_text(TOKEN + "\n")  # a Secret's value often ends with a newline
    assert apiauth.read_token(good) == TOKEN
    for text in ("", "short", "with space in the token 0123"):
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(ConfigError):
            apiauth.read_token(bad)
    with pytest.raises(ConfigError):
        apiauth.read_token(tmp_path / "missing")


def test_headers() -> None:
    assert apiauth.allowed(TOKEN, {"Authorization": f"Bearer {TOKEN}"})
    assert apiauth.allowed(TOKEN, {"Authorization": f"bearer {TOKEN}"})
    assert apiauth.allowed(TOKEN, {"dapr-api-token": TOKEN})
    assert not apiauth.allowed(TOKEN, {})
    assert not apiauth.allowed(TOKEN, {"Authorization": f"Basic {TOKEN}"})
    assert not apiauth.allowed(TOKEN, {"Authorization": f"Bearer {TOKEN}x"})
    assert not apiauth.allowed(TOKEN, {"dapr-api-token": TOKEN[:-1]})


@pytest.mark.parametrize(
    "extra",
    [["--api-locks", "jobs/"], ["--drain-timeout", "5s"]],
    ids=["api-locks", "drain"],
)
def test_refuses_to_start_off_loopback_without_a_token(
    redis_server: RedisServer, extra: list[str]
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "redlease", "sidecar", "--identity", "pod-a", "--lock", "x",
         "--redis", redis_server.url, "--http", f"0.0.0.0:{free_port()}", "--state-dir", "",
         *extra],
        capture_output=True, text=True, timeout=60, env=env(), cwd=ROOT,
    )  # fmt: skip
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "--api-token-file" in lines[0] and "0.0.0.0" in lines[0]


@pytest.fixture
def guarded(
    sidecars: Callable[..., Sidecar], redis_server: RedisServer, lock_name: str, tmp_path: Path
) -> Sidecar:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    extra = ["--api-locks", "jobs/", "--api-token-file", str(token), "--drain-timeout", "5s"]
    return sidecars("pod-a", lock_name, [redis_server.url], extra=extra).wait_up()


PROTECTED = [
    ("POST", "/locks/jobs/a/acquire", {"ttl_ms": 5000}),
    ("GET", "/locks/jobs/a", None),
    ("POST", LOCK, {"resourceId": "d", "lockOwner": "o", "expiryInSeconds": 5}),
    ("GET", "/v1.0/metadata", None),
    ("POST", "/drained", None),
]


def test_requests_without_the_token_are_refused(guarded: Sidecar) -> None:
    for method, path, body in PROTECTED:
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                        {"dapr-api-token": TOKEN + "x"}):  # fmt: skip
            code, doc = call(guarded, method, path, body, headers=headers)
            assert (code, doc["field"]) == (401, "Authorization"), (path, headers, doc)


def test_either_header_carries_the_token(guarded: Sidecar) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    dapr = {"dapr-api-token": TOKEN}
    assert (
        call(guarded, "POST", "/locks/jobs/a/acquire", {"ttl_ms": 5000}, headers=bearer)[0] == 200
    )
    assert call(guarded, "GET", "/locks/jobs/a", headers=dapr)[1]["holder"] == "pod-a"
    doc = {"resourceId": "d", "lockOwner": "o", "expiryInSeconds": 5}
    assert call(guarded, "POST", LOCK, doc, headers=dapr) == (200, {"success": True})
    assert call(guarded, "GET", "/v1.0/metadata", headers=bearer)[0] == 200
    assert call(guarded, "POST", "/drained", headers=bearer)[0] == 409  # not draining: past auth


def test_probes_and_views_stay_open(guarded: Sidecar) -> None:
    for path in ("/healthz", "/readyz", "/status", "/", "/metrics", "/v1.0/healthz"):
        code, _ = call(guarded, "GET", path)
        assert code in (200, 204, 503), (path, code)  # answered, not 401
