"""RedLock over N independent Redis masters: pass a :class:`NodeSet` where a client goes.

Re-exports only; the code lives in :mod:`redlease.core.quorum` (see docs/quorum.md).
"""

from redlease.core.quorum import NodeSet, client_from_url, node_name

__all__ = ["NodeSet", "client_from_url", "node_name"]
