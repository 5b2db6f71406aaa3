"""The one clock of every chaos history: comparable across the processes of one machine.

``CLOCK_MONOTONIC`` on Linux is system-wide (every process reads the same counter, which no
wall-clock step moves), so an interval taken in a client process and one taken in the runner
can be ordered against each other. ``time.monotonic()`` is the same clock on Linux, but only
documented as "per process" elsewhere, so the chaos tools name the clock explicitly.
"""

from __future__ import annotations

import time


def now() -> float:
    """Seconds on the machine-wide monotonic clock."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)
