"""RedLock over N independent Redis masters: pass a :class:`NodeSet` where a client goes.

See docs/quorum.md. The pure decisions live in :mod:`redlease.core.rules`, the sans-I/O flows in
:mod:`redlease.core.quorum.flows`; :mod:`._blocking` and :mod:`._aio` only move bytes.
"""

from redlease.core.quorum.nodeset import NodeSet, client_from_url, node_name

__all__ = ["NodeSet", "client_from_url", "node_name"]
