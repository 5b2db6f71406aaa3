"""Development tooling: local redis-server processes and a fault-injecting TCP proxy.

Used by the tests, the chaos runs, the benchmarks and ``redlease demo``; never by the lock
library, the sidecar or the operator (an import-linter contract checks it).
"""
