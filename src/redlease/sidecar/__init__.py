"""The leader-election sidecar: many replicas of a pod, exactly one of them active.

:mod:`.config` (validated settings and the DistributedLock mapping), :mod:`.election` (the
sidecar's rules, pure), :mod:`.elector` (the one campaign loop with those rules), :mod:`.daemon`
(HTTP, state file, pod label around it), :mod:`.lockref` (following a DistributedLock),
:mod:`.podlabel` (the leader label), :mod:`.mirror` (Lease mirror and Events). Kubernetes API
calls go through :mod:`redlease.kube.client`.
"""

from redlease.sidecar.config import ElectionConfig, SidecarConfig, Timing
from redlease.sidecar.election import Candidate, Transition

__all__ = ["Candidate", "ElectionConfig", "SidecarConfig", "Timing", "Transition"]
