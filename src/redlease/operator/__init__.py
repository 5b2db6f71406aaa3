"""The DistributedLock operator (``redlease operator``): kopf handlers over pure reconcile logic.

Modules: :mod:`.reconcile` (status, change detection, events), :mod:`.reader` (pipelined async
reads), :mod:`.refresher` (one read per node per cycle), :mod:`.runtime` (the refresh loop),
:mod:`.handlers` (kopf), :mod:`.config` (``OperatorConfig``), :mod:`.runner`; sidecar
injection: :mod:`.inject` (pure: pod -> JSON patch) and :mod:`.webhook` (the kopf admission
webhook serving it).

Importing the package does not import kopf (``redlease inject`` uses only :mod:`.inject`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redlease.operator.config import OperatorConfig

__all__ = ["OperatorConfig"]


def __getattr__(name: str) -> Any:
    if name == "OperatorConfig":
        from redlease.operator.config import OperatorConfig

        return OperatorConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
