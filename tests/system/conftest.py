"""System tests: every part together (sidecars, `redlease` commands, the operator in kopf
against KMock, real redis-servers). The operator harness lives with the operator tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))

from dlock_harness import cluster  # noqa: E402

__all__ = ["cluster"]
