"""Fixtures of the sidecar tests: real redis-server and real sidecar processes."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from redlease.devtools.sidecarprocs import Sidecar

_names = itertools.count()


@pytest.fixture
def lock_name() -> str:
    return f"sc{next(_names)}"


@pytest.fixture
def sidecars() -> Iterator[Callable[..., Sidecar]]:
    """Start sidecars; every one is killed at the end of the test."""
    started: list[Sidecar] = []

    def start(*args: Any, **kwargs: Any) -> Sidecar:
        sc = Sidecar(*args, **kwargs).start()
        started.append(sc)
        return sc

    yield start
    for sc in started:
        sc.stop()
