"""Every port of a real `redlease operator` process (metrics, liveness, the HTTPS webhook) under
hundreds of half-open connections and a descriptor limit of 256: the operator keeps serving and
reconciling, the idle connections are dropped within the header timeout, the log stays short.

The floods of the three ports are queued while the operator is stopped (SIGSTOP), so that it
accepts on every port at once: each port then holds its cap and the sockets still on asyncio's
accept path (``portlimits.port_descriptors``), all three at the same time."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import kmock
import pytest
import trustme

import redlease
from redlease.devtools.kubeemulator import (
    NAMESPACE,
    Cluster,
    Emulator,
    declare,
    kubeconfig,
    until,
    watching,
)
from redlease.devtools.localredis import RedisServer, free_port
from redlease.devtools.netfault import closed_by_server, half_open
from redlease.devtools.webhookharness import parse_answer, review
from redlease.operator import ports
from redlease.serving.portlimits import REQUEST_TIMEOUT

FD_LIMIT = 256
FLOOD = 300  # half-open connections per port
HALF = b"GET /healthz HTTP/1.1\r\nHost: operator\r\nX-Slow: "  # never finished


@pytest.fixture
async def api() -> AsyncIterator[tuple[Emulator, str]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        yield emulator, str(server.url).rstrip("/")


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Peaks(threading.Thread):
    """Samples how many descriptors the operator has open, until ``done``; ``fds``: the most
    seen (a sample misses the briefest peaks: the log's accept errors do not)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.fds = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            with contextlib.suppress(OSError):  # the process may be exiting
                self.fds = max(self.fds, open_fds(self.pid))
            self.done.wait(0.001)


async def get(url: str, **kwargs: object) -> int:
    try:
        timeout = aiohttp.ClientTimeout(total=5)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, **kwargs) as resp,  # type: ignore[arg-type]
        ):
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def admitted(port: int, ca: trustme.CA) -> bool:
    """The webhook answers an AdmissionReview (a pod that asks for nothing: allowed as is)."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"}, "spec": {}}
    try:
        async with (
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=context),
                timeout=aiohttp.ClientTimeout(total=5),
            ) as session,
            session.post(f"https://127.0.0.1:{port}/inject", json=review(pod)) as resp,
        ):
            return resp.status == 200 and parse_answer(await resp.json()).allowed
    except (aiohttp.ClientError, TimeoutError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("election", [True, False], ids=["leader-election", "single"])
async def test_half_open_flood_on_every_port(
    api: tuple[Emulator, str], redis_server: RedisServer, tmp_path: Path, election: bool
) -> None:
    emulator, url = api
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(keyfile))
    webhook, metrics, health = free_port(), free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", url))}
    env["REDLEASE_REFRESH"] = "0.3"
    for name in ("KUBERNETES_SERVICE_HOST", "POD_NAME", "POD_NAMESPACE"):
        env.pop(name, None)
    extra = ["--leader-election", "--lease-namespace", "ops", "--identity", "op-a"]
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "redlease", "operator", "--namespace", NAMESPACE,
            *(extra if election else []),
            "--webhook", f"127.0.0.1:{webhook}", "--webhook-cert", str(certfile),
            "--webhook-key", str(keyfile),
            "--metrics", f"127.0.0.1:{metrics}",
            "--liveness", f"http://127.0.0.1:{health}/healthz",
            env=env, stdout=out, stderr=out, preexec_fn=_limit,
        )  # fmt: skip
    liveness = f"http://127.0.0.1:{health}/healthz"

    async def live() -> bool:
        return await get(liveness) == 200

    socks: list[socket.socket] = []
    peaks = Peaks(proc.pid)
    peaks.start()
    try:
        await until(lambda: watching(emulator) or proc.returncode is not None, 30, "watch")
        cluster = Cluster(emulator, None, url)  # type: ignore[arg-type]
        await cluster.create("flood", {"keys": ["f"], "nodes": [{"url": redis_server.url}]})
        await until(lambda: cluster.status("flood").get("phase") == "Free", 30, "Free")
        await until(live, 30, "liveness")
        baseline = open_fds(proc.pid)

        started = time.monotonic()
        proc.send_signal(signal.SIGSTOP)  # every port's flood waits in the kernel's queue
        try:
            for port, data in ((metrics, HALF), (health, HALF), (webhook, b"")):
                socks += await asyncio.to_thread(half_open, port, FLOOD, data)
        finally:
            proc.send_signal(signal.SIGCONT)
        opened = time.monotonic() - started
        # a long kernel queue: connections are not dropped (a dropped SYN costs a client 1 s)
        assert opened < 15, f"{3 * FLOOD} connections took {opened:.1f}s"

        # every port still answers, and the lock is still reconciled
        assert await live()
        assert await get(f"http://127.0.0.1:{metrics}/metrics") == 200
        assert await admitted(webhook, ca)
        holder = redlease.Lock(redis_server.client(), "f", ttl=60, identity="worker")
        holder.acquire()
        await until(lambda: cluster.status("flood").get("holder") == "worker", 30, "Held")

        # the server drops every unfinished connection after its timeout
        checked = time.monotonic()
        await until(
            lambda: all(closed_by_server(s) for s in socks),
            REQUEST_TIMEOUT * 3,
            "every half-open connection dropped",
        )
        dropped = time.monotonic() - checked
        assert proc.returncode is None
        assert await live()
    finally:
        peaks.done.set()
        for s in socks:
            s.close()
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    peaks.join()
    text = log.read_text(errors="replace")
    lines = len(text.splitlines())
    print(
        f"\n{3 * FLOOD} half-open connections opened in {opened:.1f}s; all dropped "
        f"{dropped:.1f}s after the checks; fds {baseline} before, {peaks.fds} at peak (limit "
        f"{FD_LIMIT}); {lines} log lines"
    )
    assert proc.returncode == 0, text[-3000:]
    assert "Too many open files" not in text and "Traceback" not in text, text[-3000:]
    assert peaks.fds < FD_LIMIT
    assert lines < 200, "log volume must stay bounded"


async def served_serial(port: int, ca: trustme.CA) -> int:
    """The serial number of the certificate a new TLS handshake gets."""
    context = ssl.create_default_context()
    ca.configure_trust(context)
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        cert = writer.get_extra_info("peercert")
        return int(cert["serialNumber"], 16)
    finally:
        writer.close()


def serial(cert: trustme.LeafCert) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).serial_number


async def test_webhook_certificate_renewal_keeps_the_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewed certificate is used by new handshakes without closing the port; files that
    cannot be read keep the current certificate (one warning), the server keeps serving."""
    ca = trustme.CA()
    first, second = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    certfile, keyfile = tmp_path / "tls.crt", tmp_path / "tls.key"
    first.cert_chain_pems[0].write_to_path(str(certfile))
    first.private_key_pem.write_to_path(str(keyfile))
    server = ports.WebhookServer(
        addr="127.0.0.1", port=free_port(), certfile=str(certfile), pkeyfile=str(keyfile),
        file_check_interval=0.1,
    )  # fmt: skip
    ready = asyncio.Event()

    async def review(_: object, **__: object) -> dict[str, object]:
        return {}

    async def run() -> None:
        async for _ in server(review):
            ready.set()

    task = asyncio.create_task(run())
    try:
        await asyncio.wait_for(ready.wait(), 10)
        assert server.port is not None
        assert await served_serial(server.port, ca) == serial(first)
        second.private_key_pem.write_to_path(str(keyfile))  # half-written rotation: no match
        second.cert_chain_pems[0].write_to_path(str(certfile))
        await until(
            lambda: _serial_is(server.port, ca, serial(second)), 10, "the renewed certificate"
        )
        keyfile.unlink()
        await until(lambda: "cannot read the certificate" in caplog.text, 10, "the warning")
        assert await served_serial(server.port, ca) == serial(second)
        assert not task.done()
        assert caplog.text.count("cannot read the certificate") == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _serial_is(port: int | None, ca: trustme.CA, want: int) -> bool:
    assert port is not None
    return await served_serial(port, ca) == want
