"""The DistributedLock operator (``redlease operator``): kopf handlers over pure reconcile logic.

Modules: :mod:`.spec` (validation), :mod:`.observe` (quorum view of per-node states),
:mod:`.reconcile` (status, change detection, events), :mod:`.reader` (pipelined async reads),
:mod:`.refresher` (one read per node per cycle), :mod:`.handlers` (kopf), :mod:`.runner`.
"""

from redlease.operator.handlers import OperatorConfig

__all__ = ["OperatorConfig"]
