"""`redlease operator` (it reads Secrets) is not dumpable: another process of its UID cannot
read its ``/proc/PID/environ``. A real operator process against KMock, as one unprivileged UID."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import pytest

from redlease.devtools.kubeemulator import NAMESPACE, Emulator, declare, kubeconfig, until, watching
from redlease.devtools.sidecarprocs import as_one_user, read_environ

MARKER = "operator-env-s3cret"


@pytest.fixture
async def api() -> AsyncIterator[tuple[Emulator, str]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        declare(emulator)
        yield emulator, str(server.url).rstrip("/")


async def test_neighbour_cannot_read_the_operator_environ(
    api: tuple[Emulator, str], tmp_path: Path
) -> None:
    emulator, url = api
    config = kubeconfig(tmp_path / "kubeconfig", url)
    env = {**os.environ, "KUBECONFIG": str(config), "REDLEASE_TEST_MARKER": MARKER}
    env["USER"] = "redlease"  # a UID without a passwd entry, as in the image
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = await asyncio.create_subprocess_exec(
        *as_one_user(), sys.executable, "-m", "redlease", "operator", "--namespace", NAMESPACE,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        await until(lambda: watching(emulator) or proc.returncode is not None, what="watch")
        if proc.returncode is not None:
            raise AssertionError((await proc.communicate())[0].decode(errors="replace"))
        seen = await asyncio.to_thread(read_environ, proc.pid, MARKER)
        assert seen == {"read": False, "error": "PermissionError"}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            await proc.communicate()
