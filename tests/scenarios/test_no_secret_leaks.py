"""No credential in any output: a known password in every accepted place (env var, flag, URL
userinfo, a Secret), every command that takes it, and every output searched for it — log
lines, HTTP answers, the state file, Events, the DistributedLock status, command output and
error messages (wrong, refused and unparsable URLs included)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import subprocess
import sys
from typing import Any
from urllib.parse import quote

import pytest

from redlease.devtools.kubeemulator import NAMESPACE, Cluster, events, until
from redlease.devtools.localredis import RedisServer
from redlease.devtools.sidecarprocs import ROOT, Sidecar, env

PASSWORD = "Pw-9#x/y?z-c0rrect"  # characters that break URL parsing when not encoded
WRONG = "Wr0ng-pw-9#x"
FORMS = (PASSWORD, quote(PASSWORD, safe=""), WRONG, quote(WRONG, safe=""))


def clean(text: str, where: str) -> None:
    for form in FORMS:
        assert form not in text, f"{where} leaks {form!r}"


def redlease(*args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "redlease", *args],
        capture_output=True, text=True, env=env(**environ), cwd=ROOT, timeout=60,
    )  # fmt: skip
    clean(out.stdout + out.stderr, f"redlease {args[0]}")
    return out


def check_sidecar(sc: Sidecar) -> None:
    for path in ("/status", "/", "/healthz", "/readyz", "/metrics"):
        code, body = sc.get(path)
        assert code in (200, 503), path
        clean(body if isinstance(body, str) else json.dumps(body), f"GET {path}")
    clean(sc.state_file.read_text(), "state file")
    clean(sc.log(), "sidecar log")


@pytest.mark.slow
async def test_a_known_password_appears_in_no_output(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = RedisServer(password=PASSWORD).start()
    host = f"127.0.0.1:{server.port}"
    in_url = f"redis://:{quote(PASSWORD, safe='')}@{host}/0"
    plain = f"redis://{host}/0"
    try:
        # the commands, with the password in each accepted place
        status = await asyncio.to_thread(redlease, "status", "--lock", "a", "--redis", in_url)
        assert status.returncode == 0, status.stderr
        await asyncio.to_thread(
            redlease, "status", "--lock", "a", "--redis", plain, "--password", PASSWORD
        )
        show_env = ["--", sys.executable, "-c", "import os; print(dict(os.environ))"]
        ran = await asyncio.to_thread(
            redlease, "run", "--lock", "r", "--redis", plain, *show_env, REDLEASE_PASSWORD=PASSWORD
        )
        assert ran.returncode == 0 and "REDLEASE_FENCING_TOKEN" in ran.stdout, ran.stderr
        ran = await asyncio.to_thread(redlease, "run", "--lock", "r", "--redis", in_url, *show_env)
        assert ran.returncode == 0, ran.stderr
        retired = await asyncio.to_thread(
            redlease, "retire", "--lock", "r", "--redis", plain, "--yes", REDLEASE_PASSWORD=PASSWORD
        )
        assert retired.returncode == 0, retired.stdout

        # wrong, refused and unparsable: one line each, without the secret
        wrong = await asyncio.to_thread(
            redlease, "status", "--lock", "a", "--redis", plain, REDLEASE_PASSWORD=WRONG
        )
        assert wrong.returncode == 1 and "authentication" in wrong.stdout + wrong.stderr
        for bad in (
            f"{plain}?password={quote(PASSWORD, safe='')}",
            f"redis://:{PASSWORD}@{host}/0",  # unencoded: does not parse
            f"redis+sentinel://:{PASSWORD}@{host}/mymaster",
        ):
            out = await asyncio.to_thread(redlease, "status", "--lock", "a", "--redis", bad)
            assert out.returncode in (1, 2) and out.stderr.count("\n") <= 1, out.stderr

        # sidecars: from the environment, and from a Secret through the DistributedLock
        await cluster.create_secret(
            "pw", {"password": base64.b64encode(PASSWORD.encode()).decode()}
        )
        await cluster.create(
            "leaky",
            {"keys": ["leaky"], "nodes": [{"url": plain}], "auth": {"secretRef": {"name": "pw"}}},
        )
        by_env = Sidecar(
            "by-env",
            "leaky",
            [plain],
            environ=env(REDLEASE_PASSWORD=PASSWORD),
            extra=["--ttl", "3", "--renew-deadline", "2", "--retry-period", "0.5"],
        )
        by_ref = Sidecar("by-ref", "", [], extra=["--lock-ref", "leaky", "--kube-api", cluster.url],
                         environ=env(POD_NAMESPACE=NAMESPACE))  # fmt: skip
        by_ref.lock = "leaky"
        scs = [by_env.start(), by_ref.start()]
        try:
            for sc in scs:
                await asyncio.to_thread(sc.wait_up)
            await until(lambda: asyncio.to_thread(lambda: any(s.is_leader() for s in scs)))
            await until(lambda: cluster.status("leaky").get("phase") == "Held", what="Held")
            await until(lambda: asyncio.to_thread(lambda: all(
                (s.status() or {}).get("nodes", {}).get("healthy") == 1 for s in scs)))  # fmt: skip
            for sc in scs:
                check_sidecar(sc)
        finally:
            for sc in scs:
                sc.stop()
        objects: list[Any] = [cluster.status("leaky"), events(cluster.api, NAMESPACE)]
        clean(json.dumps(objects), "DistributedLock status and Events")
        clean("\n".join(r.getMessage() for r in caplog.records), "operator log")
    finally:
        server.stop()
