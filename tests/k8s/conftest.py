"""Fixtures for the offline Kubernetes checks (helpers live in k8s_helpers.py)."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_helpers import crd


@pytest.fixture(scope="session")
def crd_doc() -> dict[str, Any]:
    return crd()
