"""Development tooling: local redis-server processes, a fault-injecting TCP proxy, and the tests'
harnesses (KMock and kopf, operator and sidecar processes, the webhook, manifest checks).

Used by the tests, the chaos runs, the benchmarks, the soak and ``redlease demo``; never by the
lock library, the sidecar or the operator (an import-linter contract checks it). No pytest here:
fixtures wrap these in the tests' conftest.py files.
"""
