"""Per-node state that redlease keeps beside a connection pool or cluster node ("home").

A home keeps redlease's state in its own ``__dict__``, so the state lives and dies with it:
a pool made later at a freed pool's address must not inherit another server's state (that let
FCALL run an unverified library, tests/core/test_function_trust.py). An object that takes no
attribute (a ``redis.asyncio`` cluster node: ``__slots__``, no weak references) gets an entry
here that holds the object itself, so its id cannot be reused while the entry stands; the
table is emptied when it grows large (the state is then learnt again: a fresh gate, a library
checked again).
"""

from __future__ import annotations

import os
import threading
from typing import Any

_SLOTTED: dict[int, dict[str, Any]] = {}
_LOCK = threading.Lock()
_MAX = 4096

FORKS = 0
"""How many forks this process descends from (read as ``homes.FORKS``): state made before a
fork (a gate's slots, kept connections) is not the child's. Counted at each fork instead of a
``getpid`` system call per request (issue 39)."""


def _forked() -> None:
    global FORKS
    FORKS += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def state(home: Any) -> dict[str, Any]:
    """Where ``home`` keeps redlease's state: its ``__dict__`` or its entry here."""
    own: dict[str, Any] | None = getattr(home, "__dict__", None)
    if own is not None:
        return own
    with _LOCK:
        found = _SLOTTED.get(id(home))
        if found is None or found["home"] is not home:
            if len(_SLOTTED) > _MAX:
                _SLOTTED.clear()
            found = _SLOTTED[id(home)] = {"home": home}
        return found
