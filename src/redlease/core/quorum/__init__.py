"""RedLock over N independent Redis masters: pass a :class:`NodeSet` where a client goes.

See docs/quorum.md. The pure decisions live in :mod:`redlease.core.rules`, the sans-I/O flows in
:mod:`redlease.core.quorum.flows`; the transport is one state machine per node connection
(:mod:`.channel`) and one flow executor (:mod:`.executor`), with thin blocking and asyncio
drivers (:mod:`._sync`, :mod:`._async`) that only move bytes and wait.
"""

from redlease.core.quorum.nodeset import NodeSet, client_from_url, node_name

__all__ = ["NodeSet", "client_from_url", "node_name"]
