"""Fixtures for the offline Kubernetes checks (helpers live in redlease.devtools.manifests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import helm_python as helm
import pytest

from redlease.devtools.manifests import CHART, crd


@pytest.fixture(scope="session")
def crd_doc() -> dict[str, Any]:
    return crd()


@pytest.fixture(scope="session")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(str(CHART)) as loaded:
        yield loaded
