"""The state file ``<state-dir>/<lock>.json`` and the ``<state-dir>/leader`` marker.

Both are replaced atomically (write a temporary file in the same directory, fsync, rename), so a
reader sees either the old or the new complete document, never a torn one.

The marker exists only while this sidecar leads and reads ``<until> <identity>``: ``until`` is
the Unix time (whole seconds, rounded down) up to which the leadership may be trusted, the
state file's ``leader_until``. A frozen or killed sidecar cannot remove its marker, so apps
without redlease check the time, never mere existence (docs/sidecar.md has a one-line shell
test)::

    read until who < /var/run/redlease/leader && [ "$until" -gt "$(date +%s)" ]

A marker found at start-up is left over from an earlier run and removed.

One sidecar per state directory: :meth:`StateFile.prepare` takes an exclusive ``flock`` on
``<state-dir>/.sidecar.lock`` (held for the process's life, released by the kernel when it ends,
also on SIGKILL) before it touches the marker; a second sidecar on the same directory refuses to
start with one line, instead of flipping the first one's state file and marker. A directory the
sidecar cannot write is refused at start as before (so the lock file is never needed on a
read-only volume); a volume that turns read-only later keeps the lock held (it is on the open
file, not on the disk).

What is on disk is a *published claim*: readers may trust it up to :attr:`StateFile.claim_until`.
A step-down is published (``leader: false``, marker removed) before the lease is released; when
that cannot be written (read-only or full volume) the elector keeps the lease, unrenewed, until
the claim has run out, so no other process is granted the lease while this one's files still
say it leads. A ``leader: false`` document that cannot be written is replaced by no document
(unlinking works on a full volume): a missing file claims nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redlease.core.times import parse_time
from redlease.errors import ConfigError
from redlease.serving.throttle import Throttle

MARKER = "leader"
DIR_LOCK = ".sidecar.lock"  # flock'ed by the sidecar that uses the directory; holds its pid
LOG_INTERVAL = 30.0  # seconds: one log line per kind of write failure per interval


def file_name(lock: str) -> str:
    """The state file name of ``lock`` (``/`` is not allowed in a file name: it becomes ``_``)."""
    return lock.replace("/", "_") + ".json"


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class StateFile:
    """Writes the status document on change and keeps the leader marker in step with it."""

    def __init__(self, state_dir: Path, lock: str) -> None:
        self.dir = state_dir
        self.path = state_dir / file_name(lock)
        self.marker = state_dir / MARKER
        self._last: dict[str, Any] | None = None
        self._marker: str | None = None
        self._file_until: float | None = None  # leader_until of a leader document on disk
        self._marker_until: float | None = None  # until of the marker on disk
        self.writes = 0

    @property
    def claim_until(self) -> float | None:
        """Unix time up to which what this process wrote may be read as "leader" (the later of
        the state file's ``leader_until`` and the marker's ``until``); ``None``: no claim."""
        claims = [t for t in (self._file_until, self._marker_until) if t is not None]
        return max(claims) if claims else None

    def prepare(self) -> int:
        """Create the directory, check it is writable (a clear error naming the flag), make it
        this process's (:func:`hold_dir`) and remove a marker left by an earlier run (this
        process does not lead yet). Returns the lock file's descriptor: keep it open."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / f".probe.{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
            held = hold_dir(self.dir)
            self.remove_marker()
        except OSError as exc:
            raise ConfigError(
                "--state-dir", f"cannot write to {self.dir}: {exc.strerror}"
            ) from None
        return held

    def publish(self, doc: dict[str, Any]) -> bool:
        """Write ``doc`` if it changed (ignoring the ever-changing ``expires_in_ms``).

        Not leading: the marker goes first, and the document is written even if removing the
        marker failed (its ``until`` runs out by itself); if the document cannot be written, the
        old one is removed instead. The first failure is raised afterwards.
        """
        key = {k: v for k, v in doc.items() if k != "expires_in_ms"}
        if key == self._last:
            return False
        leader = bool(doc.get("leader"))
        failure: OSError | None = None
        if not leader:
            try:
                self.remove_marker()
            except OSError as exc:
                failure = exc
        data = (json.dumps(doc, sort_keys=True) + "\n").encode()
        try:
            atomic_write(self.path, data)
        except OSError as exc:
            if leader:
                raise
            failure = failure or exc
            self._withdraw()
            raise failure from None
        self._file_until = until_epoch(doc.get("leader_until")) if leader else None
        if leader:
            text = marker_text(doc.get("leader_until"), str(doc.get("identity", "")))
            if text != self._marker:
                atomic_write(self.marker, text.encode())
                self._marker = text
                self._marker_until = float(text.split()[0])
        self._last = key
        self.writes += 1
        if failure is not None:
            raise failure
        return True

    def remove_marker(self) -> None:
        self._marker = None
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        self._marker_until = None

    def _withdraw(self) -> None:
        """Remove the state file (its claim with it); leaves it if that fails too."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            return
        self._file_until = None
        self._last = None


def hold_dir(state_dir: Path) -> int:
    """Take ``state_dir`` for this process: an exclusive ``flock`` on :data:`DIR_LOCK`, whose
    content is the holder's pid. Returns the open descriptor (the lock lasts as long as it);
    :class:`ConfigError` naming ``--state-dir`` when another process holds it. The descriptor
    is read-only (a ``flock`` needs no write access): a file open for writing would keep the
    volume from being remounted read-only (test_broken_volume.py)."""
    path = state_dir / DIR_LOCK
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise ConfigError(
            "--state-dir",
            f"{state_dir} is in use by another sidecar (pid {other or 'unknown'} holds "
            f"{DIR_LOCK}): give each sidecar its own state directory",
        ) from None
    except BaseException:
        os.close(fd)
        raise
    with contextlib.suppress(OSError):  # who holds it, for the refusal above
        path.write_bytes(f"{os.getpid()}\n".encode())
    return fd


def until_epoch(leader_until: object) -> float | None:
    """A status document's ``leader_until`` (RFC 3339) as Unix time; ``None`` if absent or
    unreadable (then it promises nothing)."""
    return parse_time(leader_until)


def marker_text(leader_until: object, identity: str) -> str:
    """``<until> <identity>``: ``until`` rounded down to whole seconds (0 if unknown)."""
    until = until_epoch(leader_until)
    return f"{0 if until is None else int(until)} {identity}\n"


def failure_kind(exc: OSError) -> str:
    """What kind of write failure ``exc`` is (``EROFS``, ``ENOSPC``...), for metrics and logs."""
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


@dataclass(slots=True)
class Failing:
    """State-file writes have failed since ``since`` (Unix time); the latest failure."""

    kind: str
    error: str
    since: float
    failures: int = 1


class WriteHealth:
    """Whether the state file can be written (pure: times are passed in): the current failure
    for ``/healthz``, and which failures to log — one line per kind per :data:`LOG_INTERVAL`."""

    def __init__(self, interval: float = LOG_INTERVAL) -> None:
        self.failing: Failing | None = None
        self.throttle = Throttle(interval)

    def failed(self, exc: OSError, now: float, wall: float) -> int | None:
        """Record a failure; returns how many were held back since the last logged one of its
        kind, or ``None`` if this one is not to be logged."""
        kind = failure_kind(exc)
        if self.failing is None:
            self.failing = Failing(kind, str(exc), wall)
        else:
            self.failing.kind, self.failing.error = kind, str(exc)
            self.failing.failures += 1
        return self.throttle.allow(kind, now)

    def written(self) -> Failing | None:
        """A write succeeded; returns the failure it ends, if any."""
        ended, self.failing = self.failing, None
        return ended
