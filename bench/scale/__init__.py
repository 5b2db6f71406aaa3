"""`make bench-scale`: how redlease's cost grows with locks, sidecars, waiters and nodes.

``python -m bench.scale [--quick]`` runs every curve against redis-server processes it starts
(and, for the operator, the Kubernetes API emulator the tests use) and writes
``bench/scale.json``, ``docs/scale.md`` and one PNG per curve beside it.
"""
