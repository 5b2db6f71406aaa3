"""Real `redlease sidecar` / `redlease run` processes for the tests, and an /status observer.

Without pytest: where a test cannot run here it raises :class:`unittest.SkipTest`, which pytest
reports as a skip."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redlease.devtools.localredis import free_port

ROOT = Path(__file__).resolve().parents[3]


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith(("REDLEASE_", "POD_"))}
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), out.get("PYTHONPATH")) if p)
    out.update(extra)
    return out


SIDECAR_UID = 10001  # the chart's runAsUser

# reads /proc/PID/environ (argv[1]) and looks for argv[2] in it; prints what happened as JSON
_READER = """
import json, sys
try:
    text = open(f"/proc/{sys.argv[1]}/environ", "rb").read().decode(errors="replace")
    print(json.dumps({"read": True, "found": sys.argv[2] in text}))
except OSError as exc:
    print(json.dumps({"read": False, "error": type(exc).__name__}))
"""


def as_one_user() -> list[str]:
    """The prefix that runs a command as the sidecars' UID without CAP_SYS_PTRACE (with it,
    any process's environ is readable). Root keeps only CAP_DAC_READ_SEARCH, to reach this
    interpreter wherever it is installed."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if sys.platform != "linux" or setpriv is None:
        raise unittest.SkipTest("running as root, and no setpriv to run as an unprivileged UID")
    return [
        setpriv, f"--reuid={SIDECAR_UID}", f"--regid={SIDECAR_UID}", "--clear-groups",
        "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", "--",
    ]  # fmt: skip


def read_environ(pid: int, needle: str) -> dict[str, Any]:
    """What a process of :func:`as_one_user` gets reading ``/proc/PID/environ``: ``read`` and
    whether ``needle`` is in it (``found``), or the ``error``."""
    out = subprocess.run(
        [*as_one_user(), sys.executable, "-c", _READER, str(pid), needle],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, step: float = 0.01) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(step)


async def until(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    """Poll ``predicate`` in a thread, so that the loop serving KMock keeps answering."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s {what}".rstrip())
        await asyncio.sleep(0.02)


class Sidecar:
    """One `python -m redlease sidecar` process with its own HTTP port and state directory."""

    def __init__(
        self,
        identity: str,
        lock: str,
        urls: Sequence[str],
        *,
        ttl: float = 1.5,
        renew_deadline: float = 1.0,
        retry_period: float = 0.1,
        extra: Sequence[str] = (),
        environ: dict[str, str] | None = None,
        max_open_files: int | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.identity = identity
        self.max_open_files = max_open_files
        self.lock = lock
        self.port = free_port()
        self.state_dir = state_dir or Path(tempfile.mkdtemp(prefix=f"redlease-sc-{identity}-"))
        # the log lives outside the state directory (a test may make that one read-only)
        logs = Path(tempfile.mkdtemp(prefix=f"redlease-sc-{identity}-log-"))
        self.log_path = logs / "sidecar.log"
        self.args = [sys.executable, "-m", "redlease", "sidecar", "--identity", identity]
        if lock:
            self.args += ["--lock", lock]
        for url in urls:
            self.args += ["--redis", url]
        self.args += [
            "--ttl", str(ttl), "--renew-deadline", str(renew_deadline),
            "--retry-period", str(retry_period), "--http", f"127.0.0.1:{self.port}",
            "--state-dir", str(self.state_dir), "--log-level", "debug", *extra,
        ]  # fmt: skip
        self.environ = environ or env()
        self.proc: subprocess.Popen[bytes] | None = None
        self._conn: http.client.HTTPConnection | None = None

    def start(self) -> Sidecar:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.args, stdout=self._log, stderr=self._log, env=self.environ, cwd=ROOT,
            preexec_fn=self._limits if self.max_open_files else None,
        )  # fmt: skip
        return self

    def _limits(self) -> None:
        import resource

        limit = self.max_open_files
        assert limit is not None  # only installed with a limit (start)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    @property
    def state_file(self) -> Path:
        return self.state_dir / f"{self.lock}.json"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str = "/status", timeout: float = 2.0) -> tuple[int, Any]:
        """GET ``path`` over a keep-alive connection; (0, None) if the sidecar does not answer."""
        for _ in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self._conn.request("GET", path)
                resp = self._conn.getresponse()
                body = resp.read()
                if path == "/metrics":
                    return resp.status, body.decode()
                return resp.status, json.loads(body)
            except (OSError, http.client.HTTPException, ValueError):
                self._conn.close()
                self._conn = None
        return 0, None

    def metric(self, name: str) -> float | None:
        """The value of the (single-series) metric ``name`` in ``/metrics``; None if absent."""
        code, text = self.get("/metrics")
        for line in text.splitlines() if code == 200 else ():
            if line.startswith((f"{name}{{", f"{name} ")):
                return float(line.split()[-1])
        return None

    def status(self) -> dict[str, Any] | None:
        code, doc = self.get("/status")
        return doc if code == 200 else None

    def is_leader(self) -> bool:
        doc = self.status()
        return bool(doc and doc["leader"])

    def wait_up(self, timeout: float = 15.0) -> Sidecar:
        for _ in range(5):
            # "sidecar started" is logged once its HTTP server has bound the port: then the
            # answers on that port are this process's (not another test process's sidecar)
            wait_until(
                lambda: (
                    self._port_taken()
                    or ('"sidecar started"' in self.log() and self.get("/healthz")[0] == 200)
                ),
                timeout,
            )
            if not self._port_taken():
                return self
            # another test process took the free port first: start again on another one
            old, self.port = self.port, free_port()
            self.args[self.args.index(f"127.0.0.1:{old}")] = f"127.0.0.1:{self.port}"
            self.start()
        raise AssertionError("no free port for the sidecar's HTTP server")

    def _port_taken(self) -> bool:
        return (
            self.proc is not None
            and self.proc.poll() == 2
            and "cannot listen on" in self.log()[-2000:]
        )

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 10.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def children(self) -> list[int]:
        """The pids of the sidecar's child processes (its ``--probes`` process); Linux only."""
        assert self.proc is not None
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except OSError:
            return []

    def stop(self) -> None:
        """Kill the sidecar and its children: once this returns, none of its ports answers."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.proc is not None and self.proc.poll() is None:
            children = self.children()
            self.signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
            for pid in children:  # ends by itself once its parent is gone: not as soon
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            wait_until(lambda: all(_ended(pid) for pid in children))
        if hasattr(self, "_log"):
            self._log.close()


def _ended(pid: int) -> bool:
    """Process ``pid`` is gone, or a zombie (its descriptors closed)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] in ("Z", "X")


@dataclass
class Sample:
    identity: str
    sent: float
    received: float
    leader: bool
    token: int | None


@dataclass
class Observer:
    """Samples every sidecar's /status in a loop, in a thread; checks there are never two leaders.

    Two leaders are *proven* when a sidecar claims an older term (lower fencing token) in an
    answer requested after another sidecar's claim of a newer term had already arrived.
    """

    sidecars: list[Sidecar]
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Observer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    def _run(self) -> None:
        conns: dict[int, http.client.HTTPConnection] = {}
        while not self._stop.is_set():
            for sc in list(self.sidecars):
                sent = time.monotonic()
                try:
                    conn = conns.get(sc.port) or http.client.HTTPConnection(
                        "127.0.0.1", sc.port, timeout=1.0
                    )
                    conns[sc.port] = conn
                    conn.request("GET", "/status")
                    doc = json.loads(conn.getresponse().read())
                except (OSError, http.client.HTTPException, ValueError):
                    conns.pop(sc.port, None)
                    continue
                self.samples.append(
                    Sample(
                        doc["identity"], sent, time.monotonic(), doc["leader"], doc["fencing_token"]
                    )
                )
            time.sleep(0.002)

    def leader_seen_after(self, t: float) -> Sample | None:
        for s in list(self.samples):
            if s.leader and s.sent >= t:
                return s
        return None

    def _spans(self) -> tuple[dict[int, float], dict[int, float], dict[int, str]] | str:
        """Per claimed token: the first arrival of a claim, the last request answered with one,
        its owner; or what is wrong when two identities claimed one token."""
        first_recv: dict[int, float] = {}
        last_sent: dict[int, float] = {}
        owner: dict[int, str] = {}
        for s in self.samples:
            if not s.leader or s.token is None:
                continue
            first_recv[s.token] = min(first_recv.get(s.token, s.received), s.received)
            last_sent[s.token] = max(last_sent.get(s.token, s.sent), s.sent)
            if owner.setdefault(s.token, s.identity) != s.identity:
                return f"token {s.token} claimed by {owner[s.token]} and {s.identity}"
        return first_recv, last_sent, owner

    def led_after(self, since: float, among: Sequence[Sidecar]) -> float | None:
        """Seconds from ``since`` until an answer to a request sent after it said one of
        ``among`` leads; None: not seen yet."""
        names = {sc.identity for sc in among}
        for s in list(self.samples):
            if s.leader and s.identity in names and s.sent >= since:
                return s.received - since
        return None

    def violations(self, holders: int = 1) -> list[str]:
        """Proven overlaps: with one holder, an older term claimed after a newer one; with
        ``holders`` > 1, more than that many terms claimed at once (see :meth:`overlaps`)."""
        if holders > 1:
            return self.overlaps(holders)
        spans = self._spans()
        if isinstance(spans, str):
            return [spans]
        first_recv, last_sent, owner = spans
        bad = []
        tokens = sorted(first_recv)
        for i, old in enumerate(tokens):
            for new in tokens[i + 1 :]:
                if last_sent[old] > first_recv[new]:
                    bad.append(
                        f"{owner[old]} still claimed token {old} after {owner[new]} claimed {new}"
                    )
        return bad

    def overlaps(self, holders: int) -> list[str]:
        """More than ``holders`` terms proven active at once. A term is proven active from the
        first arrival of a claim of it to the last request of one that was answered with a
        claim of it (every claim in between was true at some moment of its round trip); where
        more than ``holders`` of these spans cover one instant, so many terms were active at
        once. Also a token claimed by two identities."""
        spans = self._spans()
        if isinstance(spans, str):
            return [spans]
        first_recv, last_sent, owner = spans
        events = sorted(
            (at, step, token)
            for token in first_recv
            if last_sent[token] > first_recv[token]
            for at, step in ((first_recv[token], 1), (last_sent[token], -1))
        )  # at one instant an end sorts before a start: touching spans do not overlap
        active: set[int] = set()
        for _, step, token in events:
            if step < 0:
                active.discard(token)
                continue
            active.add(token)
            if len(active) > holders:
                return [
                    f"{len(active)} terms active at once: "
                    + ", ".join(f"{owner[t]} (token {t})" for t in sorted(active))
                ]
        return []
