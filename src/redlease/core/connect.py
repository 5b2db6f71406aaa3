"""Where a lock lives: node sets, TLS, and the redis-py client for a target.

The node-set rules (1 node = one Redis or a Sentinel-managed master, 3 or more = a RedLock
set, several seeds of one cluster), TLS material and client construction; the URL grammar they
rest on is :mod:`redlease.core.urls`. The CLI, the sidecar, the operator and the spec model all
call these; none repeats them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from redlease.core.rules import majority
from redlease.core.urls import SENTINEL_SCHEMES, Consent, check_consent, node_name, validate_url
from redlease.errors import ConfigError

# --- targets ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tls:
    """TLS settings for ``rediss://`` nodes (ignored for the others). ``ca_data`` is a PEM
    bundle (a CA read from a Secret), trusted together with ``ca_file``; a client certificate
    and key are files (Python's ssl loads them only from files: see :func:`with_pem`)."""

    insecure_skip_verify: bool = False  # no certificate check (testing only)
    ca_file: str | None = None
    cert_file: str | None = None  # client certificate (mTLS)
    key_file: str | None = None
    ca_data: str | None = field(default=None, repr=False)

    @property
    def client_certificate(self) -> bool:
        return self.cert_file is not None


def validate_tls(
    *,
    insecure_skip_verify: bool = False,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    fields: tuple[str, str, str, str] = (
        "--tls-insecure-skip-verify",
        "--tls-ca-file",
        "--tls-cert-file",
        "--tls-key-file",
    ),
) -> Tls:
    """TLS settings from flags: readable files, a certificate only with its key, and no CA
    together with "skip verification" (errors name the flag)."""
    skip_flag, ca_flag, cert_flag, key_flag = fields
    for path, flag in ((ca_file, ca_flag), (cert_file, cert_flag), (key_file, key_flag)):
        if path is not None:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise ConfigError(flag, f"cannot read {path}: {exc.strerror}") from None
    if (cert_file is None) != (key_file is None):
        raise ConfigError(cert_flag if cert_file is None else key_flag, "give both, or neither")
    if insecure_skip_verify and ca_file is not None:
        raise ConfigError(skip_flag, f"cannot be combined with {ca_flag}")
    return Tls(insecure_skip_verify, ca_file, cert_file, key_file)


class _PemFiles:
    """Client certificates and keys given as text, as files Python's ssl can load.

    On Linux they live in anonymous memory files (``memfd``) opened as ``/proc/self/fd/N``:
    nothing on disk, and it works on a read-only root filesystem. Elsewhere: a private (0700)
    temporary directory, files 0600. Kept by content for the life of the process, so the same
    certificate gives the same paths (and the same pooled connections); never logged.
    """

    def __init__(self) -> None:
        self._paths: dict[str, str] = {}
        self._dir: str | None = None

    def path(self, text: str, name: str) -> str:
        import hashlib
        import os

        digest = hashlib.sha256(text.encode()).hexdigest()
        found = self._paths.get(digest)
        if found is not None:
            return found
        data = text.encode()
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create(f"redlease-{name}", os.MFD_CLOEXEC)
            os.write(fd, data)
            path = f"/proc/{os.getpid()}/fd/{fd}"
        else:  # pragma: no cover - not Linux
            import tempfile

            if self._dir is None:
                self._dir = tempfile.mkdtemp(prefix="redlease-tls-")  # mode 0700
            path = os.path.join(self._dir, f"{digest[:16]}-{name}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        self._paths[digest] = path
        return path


_PEM_FILES = _PemFiles()


def with_pem(
    tls: Tls, ca: str | None = None, cert: str | None = None, key: str | None = None
) -> Tls:
    """``tls`` plus a CA bundle and a client certificate given as PEM text (from a Secret)."""
    out = tls
    if ca is not None:
        out = dataclasses.replace(out, ca_data=ca)
    if cert is not None and key is not None:
        out = dataclasses.replace(
            out, cert_file=_PEM_FILES.path(cert, "cert"), key_file=_PEM_FILES.path(key, "key")
        )
    return out


@dataclass(frozen=True, slots=True)
class Target:
    """The Redis node set of a lock and how to reach it (no secret in ``repr``).

    ``urls``: one URL (a Redis or a Sentinel-managed master), several independent nodes (a
    RedLock set) or, with ``cluster``, the seeds of one Redis Cluster. ``quorum`` is the
    effective quorum (a majority unless set). ``strict_restart``: the RedLock set's opt-in
    strict restart mode (:class:`~redlease.core.quorum.NodeSet`'s ``strict_restart``).
    """

    urls: tuple[str, ...]
    cluster: bool = False
    quorum: int = 1
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: Tls = Tls()
    consent: Consent | None = None  # where the credentials may go (None: anywhere)
    strict_restart: bool = False

    @property
    def total(self) -> int:
        """Nodes as health counts them: a cluster is one logical node."""
        return 1 if self.cluster else len(self.urls)

    @property
    def redlock(self) -> bool:
        return not self.cluster and len(self.urls) > 1

    @property
    def names(self) -> tuple[str, ...]:
        """Secret-free node names, one per counted node."""
        if self.cluster:
            return ("cluster " + ",".join(node_name(u) for u in self.urls),)
        return tuple(node_name(u) for u in self.urls)

    def nodes(self) -> list[Target]:
        """One single-node target per counted node (a cluster stays whole)."""
        if not self.redlock:
            return [self]
        return [dataclasses.replace(self, urls=(u,), quorum=1) for u in self.urls]

    def with_credentials(
        self, username: str | None, password: str | None, consent: Consent | None = None
    ) -> Target:
        """The target with credentials, and the nodes their owner lets them go to."""
        return dataclasses.replace(
            self, username=username or None, password=password or None
        ).restricted(consent)

    def restricted(self, consent: Consent | None) -> Target:
        """The target whose secrets go only where ``consent`` (and any earlier one) allows."""
        if consent is None:
            return self
        return dataclasses.replace(self, consent=consent & self.consent)

    def with_tls(self, tls: Tls) -> Target:
        return dataclasses.replace(self, tls=tls)


def validate_target(
    urls: Sequence[str],
    *,
    cluster: bool = False,
    quorum: int | None = None,
    username: str | None = None,
    password: str | None = None,
    tls: Tls = Tls(),
    credentials_in_urls: bool = True,
    field: str = "--redis",
    url_field: str = "",
    quorum_field: str = "--quorum",
    strict_restart: bool = False,
    strict_field: str = "--strict-restart",
) -> Target:
    """The node-set rules, for flags and for specs alike (errors name ``field``).

    1 node: one Redis (or a Sentinel-managed master); 2 nodes: refused (a majority of 2 is 2,
    so one node down stops everything: use 1, or 3 or more); 3 or more: a RedLock set whose
    quorum is a majority unless a larger one is given; ``cluster``: the seeds of one Redis
    Cluster (no quorum, no Sentinel). ``url_field`` names one URL in errors (``{i}`` is its
    index; default: ``field``). ``strict_restart`` applies to a RedLock set only.
    """
    if not urls:
        raise ConfigError(field, "at least one Redis URL is required")
    for i, url in enumerate(urls):
        where = url_field.format(i=i) if url_field else field
        validate_url(url, where, credentials=credentials_in_urls)
    names = [node_name(u) for u in urls]
    if len(set(names)) != len(names):
        raise ConfigError(field, "the same node is listed twice")
    if cluster:
        if any(urlsplit(u).scheme in SENTINEL_SCHEMES for u in urls):
            raise ConfigError(field, "a Redis Cluster is not reached through Sentinel")
        if quorum is not None:
            raise ConfigError(quorum_field, "does not apply to a Redis Cluster")
        effective = 1
    else:
        n = len(urls)
        if n == 2:
            raise ConfigError(
                field, "2 nodes give no fault tolerance: use 1 node, 3 or more (RedLock), "
                "or a cluster"
            )  # fmt: skip
        if quorum is not None and (isinstance(quorum, bool) or not isinstance(quorum, int)):
            raise ConfigError(quorum_field, f"must be an integer, got {quorum!r}")
        if quorum is not None and not majority(n) <= quorum <= n:
            raise ConfigError(
                quorum_field, f"must be a majority of the {n} node(s): {majority(n)} to {n}"
            )
        effective = quorum if quorum is not None else majority(n)
    if not isinstance(strict_restart, bool):
        raise ConfigError(strict_field, f"must be true or false, got {strict_restart!r}")
    if strict_restart and (cluster or len(urls) < 3):
        raise ConfigError(
            strict_field, "applies to a RedLock set of 3 or more nodes (it is the restart rule "
            "of their fence counters)"
        )  # fmt: skip
    return Target(
        tuple(urls),
        cluster,
        effective,
        username or None,
        password or None,
        tls,
        strict_restart=strict_restart,
    )


# --- clients ---------------------------------------------------------------------------------


def _url_options(url: str, tls: Tls) -> dict[str, Any]:
    """redis-py keyword arguments for one URL (TLS ones only where the URL uses TLS)."""
    if not urlsplit(url).scheme.startswith("rediss"):
        return {}
    out: dict[str, Any] = {}
    if tls.insecure_skip_verify:
        out["ssl_cert_reqs"] = "none"
    if tls.ca_file:
        out["ssl_ca_certs"] = tls.ca_file
    if tls.ca_data:
        out["ssl_ca_data"] = tls.ca_data
    if tls.cert_file:
        out["ssl_certfile"] = tls.cert_file
    if tls.key_file:
        out["ssl_keyfile"] = tls.key_file
    return out


def connect_target(
    target: Target,
    *,
    asyncio: bool = False,
    socket_timeout: float | None = 5.0,
    max_connections: int | None = None,
    **nodeset_options: Any,
) -> Any:
    """A client for ``target``: ``Redis`` (or a Sentinel master client), ``RedisCluster``, or
    a :class:`~redlease.core.quorum.NodeSet` for a RedLock set; ``asyncio=True`` for the
    ``redis.asyncio`` flavour. With a :attr:`Target.consent`, every URL must be allowed and
    a master a Sentinel names is checked before the client connects to it.
    ``max_connections``: the pool size of each node's client, unless its URL sets one."""
    if target.consent is not None:
        check_consent(target.consent, target.urls)
    common: dict[str, Any] = {}
    if max_connections is not None:
        common["max_connections"] = max_connections
    if target.username is not None:
        common["username"] = target.username
    if target.password is not None:
        common["password"] = target.password
    if socket_timeout is not None:
        common["socket_timeout"] = socket_timeout
        common["socket_connect_timeout"] = socket_timeout
    if target.cluster:
        # every seed is asked for the slot map until one answers (the first may be down);
        # after that the client knows every node from the cluster itself
        opts = {**common, **_url_options(target.urls[0], target.tls)}
        seeds = [(p.hostname or "", p.port or 6379) for p in map(urlsplit, target.urls[1:])]
        if asyncio:
            from redis.asyncio.cluster import ClusterNode as AsyncNode
            from redis.asyncio.cluster import RedisCluster as AsyncCluster

            nodes: list[Any] = [AsyncNode(h, p) for h, p in seeds]
            return AsyncCluster.from_url(target.urls[0], startup_nodes=nodes, **opts)
        from redis.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(h, p) for h, p in seeds]  # type: ignore[no-untyped-call]
        return RedisCluster.from_url(target.urls[0], startup_nodes=nodes, **opts)
    from redlease.core.quorum.nodeset import NodeSet, client_from_url

    guard = {} if target.consent is None else {"consent": target.consent}
    clients = [
        client_from_url(u, asyncio=asyncio, **guard, **{**common, **_url_options(u, target.tls)})
        for u in target.urls
    ]
    if len(clients) == 1:
        return clients[0]
    options = {"strict_restart": target.strict_restart, **nodeset_options}
    return NodeSet(clients, quorum=target.quorum, **options)


def connect(
    urls: Sequence[str],
    *,
    asyncio: bool = False,
    cluster: bool = False,
    username: str | None = None,
    password: str | None = None,
    socket_timeout: float | None = 5.0,
) -> Any:
    """A client for ``urls`` after checking them with :func:`validate_target`."""
    target = validate_target(urls, cluster=cluster, username=username, password=password)
    return connect_target(target, asyncio=asyncio, socket_timeout=socket_timeout)
