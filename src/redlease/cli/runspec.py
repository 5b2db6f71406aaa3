"""What `redlease run` is told and answers: its exit statuses, :class:`RunConfig` and the check
of COMMAND before anything connects (127 / 126, as `env`). Pure: :mod:`redlease.cli.run` builds a
:class:`RunConfig` from flags, :mod:`redlease.cli.runner` runs it; both take these from here."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redlease.kube.auth import ClusterAuth
    from redlease.sidecar.config import ElectionConfig, LockRef

# Exit statuses of `redlease run` itself (README's table, docs/sidecar.md; tests/cli/test_readme.py
# keeps the README in step); COMMAND's are passed on.
BAD_INPUT = 2  # a flag, env var or COMMAND line that does not parse
UNAVAILABLE = 69  # EX_UNAVAILABLE: Redis not reached / no quorum; COMMAND did not run
NOT_ACQUIRED = 75  # --try / --timeout: the lease was held by another; COMMAND did not run
LEASE_LOST = 76  # the lease ended while COMMAND ran: it was stopped, whatever it exited with
NOT_EXECUTABLE = 126
NOT_FOUND = 127


@dataclass(frozen=True, slots=True)
class RunConfig:
    """`redlease run`: an election from flags, or a ``lock_ref`` to read it from."""

    identity: str
    election: ElectionConfig | None
    command: tuple[str, ...]
    grace: float | None = None
    lock_ref: LockRef | None = None
    kube: ClusterAuth | None = None  # None: no Kubernetes API (not in a cluster)
    keep_credentials: bool = False
    wait: float | None = None  # give up after waiting this long (0: --try); None: wait on
    conflict_exit: int = NOT_ACQUIRED  # the exit status when another holds it (flock -E)


def command_problem(command: tuple[str, ...], path: str | None) -> tuple[int, str] | None:
    """Why ``command`` cannot be started (exit status and reason, as `env` says), or None."""
    name = command[0]
    found = name if "/" in name else shutil.which(name, mode=os.F_OK, path=path)
    if found is None or not os.path.exists(found):
        return NOT_FOUND, f"{name!r}: not found"
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        return NOT_EXECUTABLE, f"{name!r}: not executable"
    return None
