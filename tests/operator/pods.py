"""Pod parts for the injection tests: app containers that pass the restricted Pod Security
level themselves, so that whatever fails the check after injection is the injector's."""

from __future__ import annotations

import copy
from typing import Any

RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def app_container(name: str = "app", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "example/app:1",
        "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
        **extra,
    }


def pod_spec(**extra: Any) -> dict[str, Any]:
    return {
        "securityContext": copy.deepcopy(RESTRICTED_POD),
        "containers": [app_container()],
        **extra,
    }
