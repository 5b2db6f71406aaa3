"""Where this process runs and who it is to the Kubernetes API.

:func:`this_pod` reads the pod's name and namespace once per command (the Downward API's
``POD_NAME`` / ``POD_NAMESPACE``, else the service account's namespace). Both logins carry the
command's identity in the user agent: the operator's (in-cluster, else a kubeconfig's current
context through the ``kubernetes`` client's loader: :mod:`redlease.kube.credentials`, imported
only then) and the sidecar's (in-cluster, or ``--kube-api``: never the ``kubernetes`` package).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from redlease.errors import ConfigError
from redlease.kube import sidecar_args as sa

if TYPE_CHECKING:
    from redlease.kube.auth import ClusterAuth, Login

SA_DIR = sa.SERVICE_ACCOUNT_DIR


@dataclass(frozen=True, slots=True)
class Pod:
    """This pod's name and namespace (None outside a pod, or when the pod does not say)."""

    name: str | None = None
    namespace: str | None = None


def this_pod() -> Pod:
    from redlease.kube.auth import service_account_namespace

    namespace = os.environ.get(sa.POD_NAMESPACE_ENV) or service_account_namespace(Path(SA_DIR))
    return Pod(name=os.environ.get(sa.POD_NAME_ENV) or None, namespace=namespace or None)


def in_cluster_api() -> str | None:
    """The API server a pod reaches (KUBERNETES_SERVICE_HOST/PORT), None outside a cluster."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def sidecar_login(api: str | None, pod: Pod, identity: str) -> ClusterAuth | None:
    """``--kube-api``, else the in-cluster API; None outside a cluster (only ``--lock-ref``,
    ``--pod-label``, ``--lease-mirror`` and ``--events`` need one). The service account's
    token (re-read on every request) and CA go with https only: a plain-http proxy on this
    host (:func:`~redlease.kube.auth.check_api_url`) gets no token. Imports nothing of the
    HTTP stack: ``redlease run`` logs in here too."""
    from redlease.kube.auth import ClusterAuth, check_api_url

    api = api or in_cluster_api()
    if not api:
        return None
    https = check_api_url(api)
    token, ca = Path(SA_DIR, "token"), Path(SA_DIR, "ca.crt")
    return ClusterAuth(
        server=api,
        token_file=token if https and token.exists() else None,
        ca_file=str(ca) if https and ca.exists() else None,
        namespace=pod.namespace,
        identity=identity,
        agent="redlease-sidecar",
    )


def operator_login(pod: Pod, identity: str) -> Login:
    """In-cluster (the service account), else the kubeconfig's current context (every
    kubeconfig kubectl accepts); found before kopf starts, since kopf itself retries a missing
    login for ever."""
    from redlease.kube.auth import in_cluster

    api = in_cluster_api()
    if api and Path(SA_DIR, "token").exists():
        return replace(in_cluster(api, Path(SA_DIR), pod.namespace), identity=identity)

    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    paths = paths or [os.path.expanduser("~/.kube/config")]
    found = [Path(p) for p in paths if os.path.isfile(p)]
    if not found:
        raise ConfigError(
            "KUBECONFIG",
            "no Kubernetes API: not in a pod (no KUBERNETES_SERVICE_HOST and service "
            f"account token) and no kubeconfig at {os.pathsep.join(paths)}",
        )
    from redlease.kube.credentials import from_kubeconfig

    return from_kubeconfig(found, identity=identity)
