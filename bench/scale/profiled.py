"""Run ``redlease operator`` with a profiler the harness switches on and off by signal.

``python -m bench.scale.profiled OUT -- operator ARGS...``: the CLI as users run it, plus two
signal handlers in its main thread (where kopf's loop runs without leader election):
``SIGUSR1`` starts cProfile and counts the cyclic garbage collector's passes and time by
generation; ``SIGUSR2`` stops both and writes ``OUT.prof`` (pstats) and ``OUT.json`` (the
collector's passes and seconds, the asyncio tasks alive, the process CPU while profiled). The
harness (bench/scale/operator.py, ``REDLEASE_SCALE_PROFILE``) sends them around its
steady-state window, so the profile holds the refresh cycles and the idle per-object work, not
the start or the first pass. A bench tool only: nothing of it ships in the package.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import json
import signal
import sys
import time
from typing import Any


class _Probe:
    """cProfile plus a garbage-collector clock, both toggled by signals."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.profile: cProfile.Profile | None = None
        self.gc: dict[int, list[float]] = {}  # generation -> [passes, seconds]
        self._gc_start = 0.0
        self._cpu = 0.0

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.thread_time()
            return
        entry = self.gc.setdefault(int(info["generation"]), [0, 0.0])
        entry[0] += 1
        entry[1] += time.thread_time() - self._gc_start

    def start(self, *_: Any) -> None:
        if self.profile is not None:
            return
        self.gc = {}
        gc.callbacks.append(self._on_gc)
        self._cpu = time.process_time()
        self.profile = cProfile.Profile()
        self.profile.enable()

    def stop(self, *_: Any) -> None:
        if self.profile is None:
            return
        self.profile.disable()
        cpu = time.process_time() - self._cpu
        gc.callbacks.remove(self._on_gc)
        self.profile.dump_stats(self.out + ".prof")
        self.profile = None
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:
            tasks = -1
        summary = {
            "cpu_s": cpu,
            "tasks": tasks,
            "gc_objects": len(gc.get_objects()),
            "gc": {str(g): {"passes": p, "seconds": s} for g, (p, s) in sorted(self.gc.items())},
        }
        with open(self.out + ".json", "w") as f:
            json.dump(summary, f, indent=1)


def main(argv: list[str]) -> int:
    out, sep, *args = argv
    if sep != "--":
        raise SystemExit("usage: python -m bench.scale.profiled OUT -- operator ARGS...")
    probe = _Probe(out)
    signal.signal(signal.SIGUSR1, probe.start)
    signal.signal(signal.SIGUSR2, probe.stop)
    from redlease.cli import main as cli

    return int(cli(args) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
