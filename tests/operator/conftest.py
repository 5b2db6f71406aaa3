"""Fixtures: a KMock emulator on a real HTTP port and the operator running against it in kopf
(defined in dlock_harness, shared with tests/system)."""

from dlock_harness import cluster

__all__ = ["cluster"]
