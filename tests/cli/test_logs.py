"""Logged exceptions never show local variables (passwords), whatever is installed: with
``rich`` present, structlog's default console traceback prints every frame's locals."""

from __future__ import annotations

import io
import logging
import secrets
from collections.abc import Iterator

import pytest
import structlog

from redlease.cli import logs


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _connect(password: str) -> None:
    credentials = {"password": password}
    raise RuntimeError(f"authentication refused ({len(credentials)} field)")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("fmt", ["console", "json"])
def test_logged_exception_shows_no_locals(fmt: str) -> None:
    stream = _Terminal()
    logs.configure("info", fmt, stream)
    password = secrets.token_hex(8)  # in a local variable only, never in a source line
    try:
        _connect(password)
    except RuntimeError:
        logging.getLogger("redlease.test").exception("library failed")
        structlog.get_logger().exception("command failed")
    out = stream.getvalue()
    assert "library failed" in out and "authentication refused" in out
    assert password not in out


def test_rich_traceback_would_show_them() -> None:
    """The control: rich's traceback, structlog's default where rich is installed."""
    pytest.importorskip("rich", reason="rich is not installed: nothing prints locals")
    password = secrets.token_hex(8)
    try:
        _connect(password)
    except RuntimeError as exc:
        sio = io.StringIO()
        structlog.dev.rich_traceback(sio, (type(exc), exc, exc.__traceback__))
    assert password in sio.getvalue()
