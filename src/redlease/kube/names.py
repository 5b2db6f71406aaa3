"""The DistributedLock's API names (one place: the operator, the sidecar, the chart tests and
the docs use these): its group, version and kind, the labels and annotations redlease reads or
writes, and the sidecar's readiness modes. Pure constants."""

from __future__ import annotations

GROUP = "redlease.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DistributedLock"
PLURAL = "distributedlocks"
FORCE_RELEASE_ANNOTATION = f"{GROUP}/force-release"
LEADER_LABEL = f"{GROUP}/leader"
# A Secret opts in to being read by redlease (operator, sidecar) with this label set to "true",
# and may name the only nodes its credentials may be sent to (comma-separated host:port).
CREDENTIALS_LABEL = f"{GROUP}/credentials"
ALLOWED_NODES_ANNOTATION = f"{GROUP}/allowed-nodes"
# A DistributedLock's keys are scoped to its namespace in Redis (namespace#key) unless the
# cluster admin labels the Namespace with this set to "true": then they are used as written,
# shared with every namespace so labelled and with plain `--lock` clients. Namespace labels are
# the admin's (as Pod Security Admission's are): a namespace's own users cannot set them.
SHARED_KEYS_LABEL = f"{GROUP}/shared-keys"

# How a sidecar answers /readyz (`--ready`, the `redlease.dev/ready` annotation): connected
# (up and reaching a quorum; the default), leader, always. See docs/sidecar.md. Here because
# the sidecar and the operator's injection both use them, and neither imports the other.
READY_MODES = ("connected", "leader", "always")
DEFAULT_READY = "connected"

__all__ = [
    "ALLOWED_NODES_ANNOTATION",
    "API_VERSION",
    "CREDENTIALS_LABEL",
    "DEFAULT_READY",
    "FORCE_RELEASE_ANNOTATION",
    "GROUP",
    "KIND",
    "LEADER_LABEL",
    "PLURAL",
    "READY_MODES",
    "SHARED_KEYS_LABEL",
    "VERSION",
]
