"""Keep a process that holds credentials out of reach of its neighbours' ``/proc`` reads."""

from __future__ import annotations

import ctypes
import sys

PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def make_undumpable() -> bool:
    """Mark this process not dumpable (``prctl(PR_SET_DUMPABLE, 0)``; Linux only, a no-op
    elsewhere). Then another process of the same UID without ``CAP_SYS_PTRACE`` can neither
    read its ``/proc/PID/environ`` or ``mem`` nor ptrace it, and it writes no core dump: the
    sidecars all run as one UID, and in a pod that shares its process namespace a neighbour
    (or the command ``redlease run`` started) could otherwise read ``REDLEASE_PASSWORD``.
    A program the process starts is dumpable again (``execve`` resets it). Returns whether the
    call took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # no libc with prctl (a static or unusual build)
        return False
