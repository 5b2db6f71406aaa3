"""The sidecar-injection admission webhook: kopf's ``@kopf.on.mutate`` on pods, over HTTPS.

Thin on purpose: read the pod's annotations (:func:`injection.read_options`), GET the named
DistributedLock (:class:`LockSource`, on kopf's loop with the operator's API client), then
:func:`injection.plan` -- the same code ``redlease inject`` runs -- whose planned pod kopf
turns into the JSON patch. Every operator replica serves it (no state, no leadership needed).
The chart owns the MutatingWebhookConfiguration and the certificate (kopf's "managed" mode,
which needs cluster-wide RBAC, stays off).

Failures: a bad annotation or (with ``require_lock``) a missing lock is a denial naming it; an
unexpected error follows the webhook's failure policy (``Ignore``: admitted without the sidecar
and a warning, ``Fail``: denied), as the API server does when the webhook cannot be reached.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import kopf

from redlease.errors import ConfigError, KubeError
from redlease.kube.client import KubeClient
from redlease.kube.secretspec import SecretRef
from redlease.kube.verbs import get
from redlease.operator import injection, ports
from redlease.operator.secrets import SecretSource

log = logging.getLogger("redlease.operator")
HANDLER_ID = "inject"  # the webhook's URL path: https://<service>/inject
FAILURE_POLICIES = ("Ignore", "Fail")


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """Where the webhook listens, its certificate, and what it injects."""

    host: str = "0.0.0.0"  # noqa: S104 - the API server reaches it through the Service
    port: int = 9443
    certfile: str | None = None  # PEM (the command line requires both)
    keyfile: str | None = None
    failure_policy: str = "Ignore"
    lock_timeout: float = 2.0  # seconds for the DistributedLock GET (timeoutSeconds is <= 5)
    inject: injection.InjectConfig = field(default_factory=injection.InjectConfig)


class LockSource:
    """GET one DistributedLock, one attempt within ``timeout`` (the API server's webhook
    timeout is the budget); a failure is reported in the lookup, never raised."""

    def __init__(self, kube: KubeClient, timeout: float = 2.0) -> None:
        self.kube = kube
        self.timeout = timeout

    async def get(self, namespace: str, name: str) -> injection.LockLookup:
        try:
            obj = await get.lock(self.kube, namespace, name, timeout=self.timeout)
        except KubeError as exc:
            if exc.status == 404:
                return injection.NOT_FOUND
            return injection.LockLookup(error=exc.reason)
        return injection.LockLookup(obj=obj)


REVIEW_API_VERSION = "admission.k8s.io/v1"  # the chart's admissionReviewVersions: ["v1"]


@dataclass(frozen=True, slots=True)
class Malformed:
    """Why a POSTed document is refused before kopf sees it; ``uid``: the review's, when it
    has one (then the answer is an AdmissionReview denial, otherwise a plain HTTP 400)."""

    reason: str
    uid: str | None = None


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else None


def check_review(body: bytes) -> dict[str, Any] | Malformed:
    """The AdmissionReview in ``body``, or why it is not one this webhook answers.

    Checks what kopf and the handler rely on, so that a forged or broken document gets one
    clear refusal instead of a traceback or an injection patch: UTF-8 JSON, an
    ``admission.k8s.io/v1`` AdmissionReview, a ``request`` with a uid, the resource, the
    operation, userInfo, objects that are objects, and a pod whose ``metadata.namespace`` (if
    set) is the ``request.namespace`` the API server set."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        return Malformed("the body is not UTF-8")
    except ValueError as exc:
        return Malformed(f"the body is not JSON: {exc}")
    except RecursionError:
        return Malformed("the body nests too deeply")
    if not isinstance(doc, dict):
        return Malformed(f"expected an AdmissionReview object, got a JSON {type(doc).__name__}")
    if doc.get("apiVersion") != REVIEW_API_VERSION or doc.get("kind") != "AdmissionReview":
        return Malformed(
            f"expected apiVersion {REVIEW_API_VERSION} kind AdmissionReview, got "
            f"{doc.get('apiVersion')!r} {doc.get('kind')!r}"
        )
    request = _mapping(doc, "request")
    uid = request.get("uid") if request is not None else None
    if request is None or not isinstance(uid, str) or not uid:
        return Malformed("request.uid is missing")
    resource = _mapping(request, "resource")
    if resource is None or not all(
        isinstance(resource.get(k), str) for k in ("group", "version", "resource")
    ):
        return Malformed("request.resource must have group, version and resource", uid)
    if not isinstance(request.get("operation"), str) or _mapping(request, "userInfo") is None:
        return Malformed("request.operation and request.userInfo are required", uid)
    for key in ("object", "oldObject"):
        value = request.get(key)
        if value is not None and not isinstance(value, Mapping):
            return Malformed(f"request.{key} must be an object", uid)
        meta = value.get("metadata", {}) if value is not None else {}
        if meta is not None and not isinstance(meta, Mapping):
            return Malformed(f"request.{key}.metadata must be an object", uid)
        for part in ("labels", "annotations"):
            if not isinstance((meta or {}).get(part) or {}, Mapping):
                return Malformed(f"request.{key}.metadata.{part} must be an object", uid)
    namespace = request.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        return Malformed("request.namespace is required (pods are namespaced)", uid)
    obj = _mapping(request, "object")
    claimed = ((obj or {}).get("metadata") or {}).get("namespace")
    if claimed and claimed != namespace:
        return Malformed(
            f"request.object.metadata.namespace {claimed!r} is not the request's namespace "
            f"{namespace!r}",
            uid,
        )
    return doc


def refusal(doc: Malformed) -> aiohttp.web.Response:
    """HTTP 400 without an uid; with one, an AdmissionReview that denies with code 400."""
    if doc.uid is None:
        return aiohttp.web.Response(status=400, text=f"redlease webhook: {doc.reason}\n")
    status = {"code": 400, "message": f"redlease webhook: malformed AdmissionReview: {doc.reason}"}
    response = {"uid": doc.uid, "allowed": False, "status": status}
    return aiohttp.web.json_response(
        {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response}
    )


class InjectionServer(ports.WebhookServer):
    """kopf's HTTPS webhook server behind the port guard (:mod:`.ports`) and
    :func:`check_review` (kopf answers a malformed review with HTTP 500 and a logged traceback,
    and one of another kind with a patch), and with the pod's namespace: pods created by
    controllers reach admission without ``metadata.namespace``; the review's
    ``request.namespace``, set by the API server, is the one used (a different
    ``metadata.namespace`` is refused)."""

    async def _serve(  # type: ignore[override]  # kopf's is static; self._serve calls both
        self, fn: Any, request: aiohttp.web.Request
    ) -> aiohttp.web.Response:
        checked = check_review(await request.read())  # aiohttp keeps the body for kopf
        if isinstance(checked, Malformed):
            log.warning("admission request refused: %s", checked.reason)
            return refusal(checked)
        return await super()._serve(fn, request)

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async def with_namespace(request: Any, **kwargs: Any) -> Any:
            payload = request["request"]  # check_review made sure of its shape
            obj = payload.get("object")
            if isinstance(obj, dict):
                if not isinstance(obj.get("metadata"), dict):
                    obj["metadata"] = {}
                obj["metadata"]["namespace"] = payload["namespace"]
            return await fn(request, **kwargs)

        async for client_config in super().__call__(with_namespace):
            yield client_config


def server(config: WebhookConfig) -> kopf.WebhookServer:
    """The admission server for ``settings.admission.server``."""
    return InjectionServer(
        addr=config.host,
        port=config.port,
        certfile=config.certfile,
        pkeyfile=config.keyfile,
        file_check_interval=30.0,  # pick up a renewed certificate (cert-manager) within 30 s
    )


def _pod_name(meta: Mapping[str, Any]) -> str:
    return str(meta.get("name") or f"{meta.get('generateName') or ''}*")


async def lookup(
    locks: LockSource, secrets: SecretSource, namespace: str, name: str
) -> injection.LockLookup:
    """The DistributedLock (its spec parsed once, in :class:`~.injection.LockLookup`) and the
    Secrets it names (auth, spec.tls), for the consent check."""
    found = await locks.get(namespace, name)
    names = found.secret_names()
    if not names:
        return found
    consent: dict[str, dict[str, Any]] = {}
    try:
        async with asyncio.timeout(locks.timeout + 0.5):
            for secret in names:
                obj = await secrets.secret(namespace, SecretRef(secret))
                # only the consent (labels, annotations) is looked at; values stay out of the pod
                consent[secret] = {"metadata": obj.get("metadata") or {}}
    except ConfigError as exc:
        return found.with_secrets({}, consent_error=exc.message)
    except TimeoutError:
        return found.with_secrets({}, consent_error="no answer in time")
    return found.with_secrets(consent)


def _become(after: dict[str, Any]) -> Any:
    """A kopf patch function that turns the body into ``after``."""

    def fn(body: dict[str, Any]) -> None:
        body.clear()
        body.update(copy.deepcopy(after))

    return fn


def register(
    registry: kopf.OperatorRegistry,
    config: WebhookConfig,
    locks: LockSource,
    secrets: SecretSource,
) -> None:
    """Add the mutating handler for pods to ``registry``."""

    @kopf.on.mutate("v1", "pods", registry=registry, id=HANDLER_ID, operations=["CREATE"])
    async def inject_sidecar(**kwargs: Any) -> None:
        body, patch, warnings = kwargs["body"], kwargs["patch"], kwargs["warnings"]
        if kwargs.get("operation") != "CREATE":
            return
        meta = body.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        where = f"{namespace}/{_pod_name(meta)}"
        raw = dict(body)
        try:
            options = injection.read_options(raw)
            if options is None:
                asked = injection.annotation_warnings(raw)  # a misspelt redlease.dev/lock
                warnings.extend(asked)
                for text in asked:
                    log.warning("pod %s: %s", where, text)
                return
            lock = await lookup(locks, secrets, namespace, options.lock)
            result = injection.plan(raw, namespace, options, lock, config.inject)
        except ConfigError as exc:
            log.warning("pod %s denied: %s", where, exc)
            raise kopf.AdmissionError(str(exc), code=400) from None
        except Exception as exc:
            log.exception("pod %s: injection failed", where)
            message = f"redlease: sidecar injection failed: {type(exc).__name__}: {exc}"
            if config.failure_policy == "Fail":
                raise kopf.AdmissionError(message, code=500) from None
            warnings.append(message + "; admitted without the sidecar")
            return
        warnings.extend(result.warnings)
        for text in result.warnings:
            log.warning("pod %s: %s", where, text)
        if result.changed:
            # kopf diffs the body after its fns against the body before: handing it the planned
            # pod gives the operations of ``result.patch`` (both are jsonpatch's diff), once
            patch.fns.append(_become(result.pod))
            log.info("pod %s: sidecar injected (lock %s)", where, options.lock)
