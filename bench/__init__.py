"""`make bench`: redlease measured against the libraries users would pick instead.

Run ``python -m bench`` (or ``make bench`` / ``make bench-quick``) from the repository root.
Every scenario starts its own redis-server processes; results go to ``bench/results.json``,
``docs/benchmarks.md`` and ``docs/handoff.png``.
"""
