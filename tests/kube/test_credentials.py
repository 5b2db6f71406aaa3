"""Every kubeconfig kubectl accepts, through the ``kubernetes`` client's loader
(kube/credentials.py): an exec plugin's token is fetched again before it expires, after a 401,
and not on every request when the plugin is broken; auth-provider tokens are sent; the sidecar
never imports ``kubernetes``.

The API server is KMock with a token check (``Emulator.tokens``): only a token the plugin issued
and that has not expired is accepted, as a managed cluster does.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import pytest

from redlease.devtools.execplugin import ExecPlugin
from redlease.devtools.kubeemulator import NAMESPACE, Emulator, declare, until
from redlease.errors import ConfigError, KubeError
from redlease.kube import credentials
from redlease.kube.client import KubeClient
from redlease.kube.credentials import from_kubeconfig


@pytest.fixture
async def api() -> AsyncIterator[tuple[Emulator, str]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        yield emulator, str(server.url).rstrip("/")


def plugin_config(tmp_path: Path, url: str, lifetime: float) -> tuple[ExecPlugin, Path]:
    plugin = ExecPlugin(tmp_path / "plugin", lifetime)
    return plugin, plugin.kubeconfig(tmp_path / "kubeconfig", url)


async def test_an_exec_token_is_fetched_again_before_it_expires(
    api: tuple[Emulator, str], tmp_path: Path
) -> None:
    emulator, url = api
    plugin, config = plugin_config(tmp_path, url, lifetime=3)
    emulator.tokens = plugin.accepts
    client = KubeClient(from_kubeconfig([config]))
    try:
        first_expiry = plugin.issued()[0][1]
        # requests across two expiries of the first token: every one is accepted
        while time.time() < first_expiry + 2:
            await client.request("GET", f"/api/v1/namespaces/{NAMESPACE}")
            await _pause()
        assert plugin.runs() >= 3
        assert emulator.unauthorized == 0
        # kopf's login takes the same token, and when to log in again
        snapshot = client.auth.snapshot()  # type: ignore[attr-defined]
        assert plugin.accepts(snapshot.token) and snapshot.expires is not None
    finally:
        await client.close()


async def test_a_401_fetches_a_new_token(
    api: tuple[Emulator, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(credentials, "RETRY", 0.2)
    emulator, url = api
    plugin, config = plugin_config(tmp_path, url, lifetime=3600)
    client = KubeClient(from_kubeconfig([config]))
    try:
        revoked = plugin.issued()[0][0]
        emulator.tokens = lambda token: plugin.accepts(token) and token != revoked
        with pytest.raises(KubeError, match="401"):
            await client.request("GET", f"/api/v1/namespaces/{NAMESPACE}")

        async def works() -> bool:
            try:
                await client.request("GET", f"/api/v1/namespaces/{NAMESPACE}")
            except KubeError:
                return False
            return True

        await until(works, what="a new token after the 401")
        assert plugin.runs() == 2  # once at the start, once after the 401
    finally:
        await client.close()


async def test_a_broken_plugin_keeps_the_last_token_and_runs_once_per_retry(
    tmp_path: Path,
) -> None:
    plugin, config = plugin_config(tmp_path, "http://127.0.0.1:9", lifetime=2)
    auth = from_kubeconfig([config])
    token = auth.credentials()["Authorization"]
    plugin.failing = True  # e.g. the SSO session behind `aws eks get-token` ended
    expiry = plugin.issued()[0][1]
    while time.time() < expiry:  # past the refresh point and the expiry
        await _pause()
    for _ in range(50):
        assert auth.credentials()["Authorization"] == token
    # one failed run, then none for RETRY seconds (not one per request)
    assert plugin.runs() == 2 and len(plugin.issued()) == 1
    plugin.failing = False
    auth._due = 0  # the RETRY seconds are over (not waited for here): a token again
    assert auth.credentials()["Authorization"] != token and plugin.runs() == 3


def test_many_threads_share_one_refresh(tmp_path: Path) -> None:
    """kopf's threads and the operator's loops ask at once when the token is due: the plugin
    runs once; the others keep the current (unexpired) token meanwhile, then get the new one."""
    from concurrent.futures import ThreadPoolExecutor

    plugin, config = plugin_config(tmp_path, "http://127.0.0.1:9", lifetime=3600)
    auth = from_kubeconfig([config])
    first = auth.credentials()
    auth._due = 0  # due now (as an expiry or a 401 makes it)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: auth.credentials(), range(64)))
    assert plugin.runs() == 2
    new = auth.credentials()
    assert new != first and all(a in (first, new) for a in answers) and new in answers


def test_an_expired_token_waits_for_the_load_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller whose token has expired while another thread runs the plugin waits for that
    run (in its own thread) and gets its token; a plugin that hangs past :data:`WAIT` leaves
    it the expired one (a 401, not a stuck caller)."""
    from concurrent.futures import ThreadPoolExecutor

    plugin, config = plugin_config(tmp_path, "http://127.0.0.1:9", lifetime=1)
    auth = from_kubeconfig([config])
    first = auth.credentials()
    expiry = plugin.issued()[0][1]
    while time.time() < expiry:  # the first token expired (nobody asked: not loaded again)
        time.sleep(0.05)
    plugin.slow = 1.0
    auth._due = 0
    with ThreadPoolExecutor(2) as pool:
        loading = pool.submit(auth.credentials)
        while plugin.runs() < 2:  # the plugin started
            time.sleep(0.01)
        waited = auth.credentials()
        assert waited == loading.result() != first and plugin.runs() == 2

        monkeypatch.setattr(credentials, "WAIT", 0.1)
        plugin.slow = 2.0
        expiry = plugin.issued()[1][1]
        while time.time() < expiry:
            time.sleep(0.05)
        auth._due = 0
        hung = pool.submit(auth.credentials)
        while plugin.runs() < 3:
            time.sleep(0.01)
        assert auth.credentials() == waited  # the expired one, after WAIT
        assert not hung.done()
        assert hung.result() not in (first, waited)


async def test_a_slow_plugin_does_not_stall_the_event_loop(
    api: tuple[Emulator, str], tmp_path: Path
) -> None:
    """The token is due and the plugin takes 3 s (an SSO round trip): it runs in a worker
    thread, the loop (which renews the operator's Lease) goes on, and requests meanwhile are
    sent with the current token, still good, instead of queueing behind the plugin."""
    import asyncio

    emulator, url = api
    plugin, config = plugin_config(tmp_path, url, lifetime=60)
    emulator.tokens = plugin.accepts
    auth = from_kubeconfig([config])
    client = KubeClient(auth)
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    path = f"/api/v1/namespaces/{NAMESPACE}"
    ticking = asyncio.create_task(ticker())
    try:
        await client.request("GET", path)
        plugin.slow = 3.0
        auth._due = 0  # due now, as half the token's lifetime makes it
        loading = asyncio.create_task(client.request("GET", path))
        await until(lambda: plugin.runs() == 2, what="the plugin's second run")  # it started
        for _ in range(5):  # while it runs: the first token, accepted
            await client.request("GET", path)
        during = (loading.done(), len(plugin.issued()))
        await loading
        # the loop never stopped for the plugin (on the loop, it stopped 3 s)
        assert max(gaps) < 1.0, f"the event loop stalled {max(gaps):.2f}s"
        print("largest gap between ticks:", round(max(gaps), 3))
        assert during == (False, 1)  # the plugin was still running, its token not issued
        assert len(plugin.issued()) == 2 and plugin.runs() == 2
        assert auth.credentials()["Authorization"] == f"Bearer {plugin.issued()[1][0]}"
        assert emulator.unauthorized == 0
    finally:
        ticking.cancel()
        await client.close()


def test_a_plugin_that_fails_at_start_is_one_line(tmp_path: Path) -> None:
    plugin, config = plugin_config(tmp_path, "http://127.0.0.1:9", lifetime=60)
    plugin.failing = True
    with pytest.raises(ConfigError) as info:
        from_kubeconfig([config])
    assert info.value.field == "KUBECONFIG" and "exec plugin gave no credentials" in str(info.value)


def test_a_token_file_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(credentials, "RELOAD", 0.0)
    token = tmp_path / "token"
    token.write_text("one\n")
    config = tmp_path / "config"
    config.write_text(
        "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:8001'}}]\n"
        f"users: [{{name: u, user: {{tokenFile: {token}}}}}]\n"
    )
    auth = from_kubeconfig([config])
    assert auth.credentials() == {"Authorization": "Bearer one"}
    token.write_text("two\n")  # rotated
    assert auth.credentials() == {"Authorization": "Bearer two"}


def test_an_oidc_auth_provider_token_is_sent(tmp_path: Path) -> None:
    claims = {"sub": "me", "exp": int(time.time()) + 3600}
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    id_token = f"eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln"
    config = tmp_path / "config"
    config.write_text(
        "current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:8001'}}]\n"
        "users: [{name: u, user: {auth-provider: {name: oidc, config: "
        f"{{client-id: k, id-token: '{id_token}', idp-issuer-url: 'https://idp'}}}}}}}}]\n"
    )
    assert from_kubeconfig([config]).credentials() == {"Authorization": f"Bearer {id_token}"}


def test_the_sidecar_never_imports_kubernetes() -> None:
    """Its memory target: the sidecar's modules, and its command, leave ``kubernetes`` out."""
    code = (
        "import sys, pkgutil, importlib, redlease.sidecar as s\n"
        "for m in pkgutil.walk_packages(s.__path__, 'redlease.sidecar.'):\n"
        "    importlib.import_module(m.name)\n"
        "import redlease.cli.sidecar, redlease.cli.run, redlease.cli.login, redlease.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # the control: the operator's login does import it
    code = "import sys, redlease.kube.credentials; print('kubernetes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


async def _pause() -> None:
    import asyncio

    await asyncio.sleep(0.1)
