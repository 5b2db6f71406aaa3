"""`make soak`: redlease for a long while under kills and restarts (soak/soak.py, docs/soak.md).

:mod:`soak.soak` drives the run (one redis-server, its sidecars, the operator, the hand-off
waiters), :mod:`soak.quorum` the 5-node RedLock set beside it, :mod:`soak.history` checks
every sidecar's terms for overlaps and token regressions, :mod:`soak.report` writes the
markdown, :mod:`soak.common` holds what they share and soak/api.py is KMock's process.
"""
