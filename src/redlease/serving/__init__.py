"""Serving HTTP: what every listening port of the sidecar and the operator shares.

:mod:`.httpguard` (header and idle timeouts, the connection cap, parked long requests,
throttled error lines; :func:`~.httpguard.serve`), :mod:`.portlimits` (its numbers) and
:mod:`.throttle` (one log line per kind per interval). Beside :mod:`redlease.kube`, below the
sidecar and the operator: it knows nothing of Kubernetes or Redis (aiohttp only), and the core
imports nothing from here.
"""
