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
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import secrets
from pathlib import Path
from typing import Any

from redlease.errors import ConfigError

MARKER = "leader"


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
        self.writes = 0

    def prepare(self) -> None:
        """Create the directory, check it is writable (a clear error naming the flag) and remove
        a marker left by an earlier run (this process does not lead yet)."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / f".probe.{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
            self.remove_marker()
        except OSError as exc:
            raise ConfigError(
                "--state-dir", f"cannot write to {self.dir}: {exc.strerror}"
            ) from None

    def publish(self, doc: dict[str, Any]) -> bool:
        """Write ``doc`` if it changed (ignoring the ever-changing ``expires_in_ms``).

        Not leading: the marker goes first, and the document is written even if removing the
        marker failed (its ``until`` runs out by itself); the failure is raised afterwards.
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
        atomic_write(self.path, (json.dumps(doc, sort_keys=True) + "\n").encode())
        if leader:
            text = marker_text(doc.get("leader_until"), str(doc.get("identity", "")))
            if text != self._marker:
                atomic_write(self.marker, text.encode())
                self._marker = text
        self._last = key
        self.writes += 1
        if failure is not None:
            raise failure
        return True

    def remove_marker(self) -> None:
        self._marker = None
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()


def marker_text(leader_until: object, identity: str) -> str:
    """``<until> <identity>``: ``until`` rounded down to whole seconds (0 if unknown)."""
    until = 0
    if isinstance(leader_until, str):
        with contextlib.suppress(ValueError):
            stamp = _dt.datetime.fromisoformat(leader_until.replace("Z", "+00:00"))
            until = int(stamp.timestamp())
    return f"{until} {identity}\n"
