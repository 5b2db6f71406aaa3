"""The lock library: everything below the sidecar, the operator and the command line.

Pure parts (keys, scripts, lock flows, the lock view, quorum rules, lease timing) and thin
sync/asyncio drivers over them. Nothing here talks to Kubernetes or reads the environment beyond
``POD_NAME`` for a default identity. The public names are re-exported by :mod:`redlease`,
:mod:`redlease.aio` and :mod:`redlease.quorum`.
"""
