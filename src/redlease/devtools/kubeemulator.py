"""kopf against KMock over real HTTP, with what kopf needs of an API server
(docs/operator.md, "Tests and what the emulator cannot check").

``Emulator`` stamps what a real API server stamps (uid, creationTimestamp, a resourceVersion
bumped on every write, generation bumped on spec changes, names for generateName), answers
creates with 201 and failed JSON-patch tests with 422. ``KopfThread`` runs kopf in its own thread
and event loop against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import jsonpatch
import kmock
import kopf

from redlease.core.times import format_time
from redlease.kube import paths
from redlease.kube.auth import ClusterAuth
from redlease.kube.client import KubeClient
from redlease.kube.names import CREDENTIALS_LABEL, GROUP, PLURAL, SHARED_KEYS_LABEL, VERSION
from redlease.operator.config import OperatorConfig
from redlease.operator.handlers import build_registry, operator_settings
from redlease.operator.runtime import Runtime
from redlease.operator.secrets import SecretSource

RESOURCE = f"{GROUP}/{VERSION}/{PLURAL}"
ADMIN = "emulator-admin"  # the tests' own token: the token check lets it through
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
LEASES = "coordination.k8s.io/v1/leases"
_rv = itertools.count(1)


class Emulator(kmock.KubernetesEmulator):
    """KubernetesEmulator plus the metadata and status codes kopf relies on, an outage
    switch: ``outage = "refuse"`` answers every request 503, ``"hang"`` answers none until the
    outage is over (``outage = None``), and a token check: with ``tokens`` set, a request whose
    bearer token it refuses is answered 401 (``unauthorized`` counts them), as an API server
    answers an expired token. The tests' own requests (:class:`Cluster`) carry ``ADMIN``, which
    it always accepts."""

    outage: str | None = None
    tokens: Callable[[str | None], bool] | None = None
    unauthorized = 0

    def _current(self, request: kmock.Request) -> dict[str, Any] | None:
        # KMock's own key; typed Any: its annotations want a resource and a name a request may lack
        key: Any = (request.resource, request.namespace, request.name)
        if key in self.objects and not self.objects[key].deleted:
            raw: dict[str, Any] = copy.deepcopy(self.objects[key].raw)
            return raw
        return None

    def _stamp(self, request: kmock.Request) -> None:
        data = request.data
        if request.action == kmock.action.CREATE and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:6]
            if request.namespace and not meta.get("namespace"):
                meta["namespace"] = request.namespace
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta["resourceVersion"] = str(next(_rv))
            meta["generation"] = 1
        elif request.action == kmock.action.UPDATE and request.name is not None:
            rv = str(next(_rv))
            if isinstance(data, dict):
                meta = data.setdefault("metadata", {})
                meta["resourceVersion"] = rv
                current = self._current(request)
                if current is not None and request.subresource is None and "spec" in data:
                    merged = kmock.Object(current)
                    merged.patch({"spec": data["spec"]})
                    if merged.raw.get("spec") != current.get("spec"):
                        meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
            elif isinstance(data, list):
                data.append({"op": "add", "path": "/metadata/resourceVersion", "value": rv})

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        while self.outage == "hang":  # noqa: ASYNC110 - a switch set by plain assignment
            await asyncio.sleep(0.05)
        if self.outage == "refuse":
            return aiohttp.web.json_response(
                {"kind": "Status", "status": "Failure", "code": 503, "message": "outage"},
                status=503,
            )
        token = _bearer(request)
        if self.tokens is not None and token != ADMIN and not self.tokens(token):
            self.unauthorized += 1
            return aiohttp.web.json_response(
                {"kind": "Status", "status": "Failure", "code": 401, "reason": "Unauthorized",
                 "message": "Unauthorized"},
                status=401,
            )  # fmt: skip
        if request.resource is not None:
            self._stamp(request)
        try:
            response = await super()._handle(request)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "Status",
                    "status": "Failure",
                    "reason": "Invalid",
                    "code": 422,
                    "message": str(exc),
                },
                status=422,
            )
        if request.action == kmock.action.CREATE and response.status == 200:
            response.set_status(201)
        return response


def _bearer(request: kmock.Request) -> str | None:
    header = {k.lower(): v for k, v in request.headers.items()}.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token if scheme.lower() == "bearer" and token else None


def _now() -> str:
    return format_time(time.time())


def declare(emulator: Emulator) -> None:
    """Resources kopf discovers (without v1/namespaces and v1/events it hangs), and the
    Namespace NAMESPACE, labelled by its admin to share its lock keys
    (``redlease.dev/shared-keys``): the tests here pair DistributedLocks with plain library
    clients, which is what that label is for (tests/scenarios/test_key_scope.py: the default)."""
    emulator[f"get {paths.namespace(NAMESPACE)}"] << {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {SHARED_KEYS_LABEL: "true"}},
    }
    emulator.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"list", "watch", "get"}
    )
    emulator.resources["v1/events"] = kmock.ResourceInfo(
        kind="Event", namespaced=True, verbs={"create", "list", "get"}
    )
    emulator.resources["v1/secrets"] = kmock.ResourceInfo(
        kind="Secret", namespaced=True, verbs={"get", "list"}
    )
    emulator.resources["v1/pods"] = kmock.ResourceInfo(
        kind="Pod", namespaced=True, verbs={"get", "list", "create", "patch"}
    )
    emulator.resources[LEASES] = kmock.ResourceInfo(
        kind="Lease", namespaced=True, verbs={"get", "list", "watch", "create", "patch", "update"}
    )
    emulator.resources[RESOURCE] = kmock.ResourceInfo(
        kind="DistributedLock",
        singular="distributedlock",
        namespaced=True,
        shortnames={"dlock", "dlocks"},
        categories={"redlease"},
        verbs={"list", "watch", "get", "patch", "create", "delete", "update"},
        subresources={"status"},
    )


class KopfThread:
    """Run an operator registry in a thread with its own loop, against ``server``."""

    def __init__(
        self,
        registry: kopf.OperatorRegistry,
        server: str,
        namespace: str,
        config: OperatorConfig | None = None,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        self.registry = registry
        self.config = config
        self.server = server
        self.namespace = namespace
        self.namespaces = list(namespaces or (namespace,))
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kopf", daemon=True)
        self.error: BaseException | None = None

        @kopf.on.login(registry=registry, id="kmock-login")
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=server, default_namespace=namespace)

    def _run(self) -> None:
        settings = operator_settings(self.config)
        try:
            asyncio.run(
                kopf.operator(
                    registry=self.registry,
                    settings=settings,
                    standalone=True,
                    namespaces=self.namespaces,
                    stop_flag=self.stop_flag,
                    ready_flag=self.ready_flag,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the test that waits for us
            self.error = exc

    async def __aenter__(self) -> KopfThread:
        self.thread.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        # Join without blocking this loop: KMock runs on it and must keep answering kopf.
        self.stop_flag.set()
        await asyncio.to_thread(self.thread.join, 20)
        assert not self.thread.is_alive(), "kopf did not stop within 20 s"


async def until(
    predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition"
) -> Any:
    """Poll ``predicate`` (every 20 ms) until it returns something truthy, or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def watching(emulator: Emulator) -> bool:
    """True once kopf has opened its watch on DistributedLocks."""
    with contextlib.suppress(Exception):
        return any(
            r.action == kmock.action.WATCH
            and r.resource is not None
            and r.resource.plural == PLURAL
            for r in list(emulator._requests)
        )
    return False


def obj(emulator: Emulator, namespace: str, name: str) -> dict[str, Any] | None:
    key = (RESOURCE, namespace, name)
    try:
        o = emulator.objects[key]
    except KeyError:
        return None
    return None if o.deleted else copy.deepcopy(o.raw)


def events(emulator: Emulator, namespace: str) -> list[dict[str, Any]]:
    out = []
    for (res, ns, _), o in list(emulator.objects.items()):
        if res.plural == "events" and ns == namespace and not o.deleted:
            out.append(copy.deepcopy(o.raw))
    return out


def iter_reasons(items: list[dict[str, Any]]) -> Iterator[str]:
    for e in items:
        yield str(e.get("reason"))


NAMESPACE = "apps"
REFRESH = 0.3
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: kmock, cluster: {{server: "{url}"}}}}]
users: [{{name: op, user: {{token: "{token}"}}}}]
contexts: [{{name: kmock, context: {{cluster: kmock, user: op, namespace: {ns}}}}}]
current-context: kmock
"""


def kubeconfig(path: Path, url: str, token: str = "test-token") -> Path:  # noqa: S107
    """A kubeconfig for a real `redlease operator` process talking to KMock at ``url``."""
    path.write_text(KUBECONFIG.format(url=url, token=token, ns=NAMESPACE))
    return path


@dataclass
class Cluster:
    """The emulated API server plus the operator runtime watching it."""

    api: Emulator
    runtime: Runtime
    url: str

    async def create(self, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "redlease.dev/v1alpha1",
            "kind": "DistributedLock",
            "metadata": {"name": name, "namespace": NAMESPACE, **meta},
            "spec": spec,
        }
        async with self.api.post(paths.locks(NAMESPACE), json=body, headers=AS_ADMIN) as resp:
            assert resp.status == 201, await resp.text()
            result: dict[str, Any] = await resp.json()
            return result

    async def patch(self, name: str, patch: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/merge-patch+json", **AS_ADMIN}
        async with self.api.patch(paths.lock(NAMESPACE, name), json=patch, headers=headers) as resp:
            assert resp.status == 200, await resp.text()

    async def delete(self, name: str) -> None:
        async with self.api.delete(paths.lock(NAMESPACE, name), headers=AS_ADMIN) as resp:
            assert resp.status == 200, await resp.text()

    async def create_secret(
        self, name: str, data: dict[str, str], consent: bool = True, **meta: Any
    ) -> None:
        """A Secret; ``consent`` labels it for redlease (redlease.dev/credentials=true)."""
        labels = {CREDENTIALS_LABEL: "true"} if consent else {}
        metadata = {"name": name, "labels": labels, **meta}
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": data}
        async with self.api.post(paths.secrets(NAMESPACE), json=body, headers=AS_ADMIN) as resp:
            assert resp.status == 201, await resp.text()

    def status(self, name: str) -> dict[str, Any]:
        obj = self.api.objects[RESOURCE, NAMESPACE, name]
        if obj.deleted:
            return {}
        return dict(obj.raw.get("status") or {})


@contextlib.asynccontextmanager
async def running_cluster() -> AsyncIterator[Cluster]:
    """KMock on a real HTTP port and the operator's handlers in kopf against it, watching
    (the ``cluster`` fixture of tests/conftest.py)."""
    async with Emulator() as api, kmock.Server(api) as server:
        declare(api)
        url = str(server.url).rstrip("/")
        kube = KubeClient(ClusterAuth(url))
        runtime = Runtime(
            OperatorConfig(namespaces=(NAMESPACE,), refresh=REFRESH, node_timeout=1.0),
            secrets=SecretSource(kube, ttl=0.0),
        )
        registry = build_registry(runtime, kopf.OperatorRegistry())  # fresh, no client login
        async with KopfThread(registry, url, NAMESPACE) as kopf_thread:
            await until(lambda: watching(api) or kopf_thread.error, what="kopf's watch")
            assert kopf_thread.error is None, kopf_thread.error
            yield Cluster(api, runtime, url)
