"""Where a lock lives: node URLs, the node-set rules, secret-free names, and redis-py clients.

One place for everything about "which Redis": the accepted URL kinds (``redis://``,
``rediss://``, ``unix://``, ``redis+sentinel://``), the node-set rules (1 node = one Redis or a
Sentinel-managed master, 3 or more = a RedLock set, several seeds of one cluster), the
redaction used in every log line and error, and client construction. The CLI, the sidecar, the
operator and the spec model all call these; none repeats them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from redlease.core.rules import majority
from redlease.errors import ConfigError

SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CREDENTIAL_PARAMS = ("password", "username", "user")  # redis-py honours these in a query
_SCHEME_HINT = "use redis://, rediss://, unix:// or redis+sentinel://"


# --- URLs ------------------------------------------------------------------------------------


def redact(url: str) -> str:
    """``url`` safe to print: a password (userinfo or query) becomes ``***``.

    The userinfo is taken up to the last ``@``, so a password with an unencoded ``/``, ``#``,
    ``?`` or ``@`` (what usually breaks URL parsing) is hidden too; a URL that still does not
    parse shows only its scheme and host.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<unparsable URL>"
    userinfo, at, hostpart = rest.rpartition("@")
    shown = ""
    if at:
        user, colon, _ = userinfo.partition(":")
        if any(c in user for c in "/?#"):
            user = "***"
        shown = f"{user}:***@" if colon else f"{user}@"
    try:
        parts = urlsplit(f"{scheme}://{hostpart}")
    except ValueError:
        return f"{scheme}://{shown}<unparsable>"
    query = parts.query
    if query:
        items = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{k}={'***' if k.lower() in CREDENTIAL_PARAMS else v}" for k, v in items)
    return parts._replace(netloc=shown + parts.netloc, query=query).geturl()


def validate_url(url: object, field: str = "--redis", *, credentials: bool = True) -> str:
    """Check one node URL; the error names ``field`` and never echoes a password.

    ``credentials=False`` refuses a user or password in the URL (the CRD keeps them in a
    Secret). Credentials in the query string are refused everywhere: redis-py honours
    ``?password=`` but it is easy to leak; use the password flag/env or a Secret.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(field, "must be a non-empty URL string")
    if "@" in url.partition("://")[2] and "@" not in urlsplit(url).netloc:
        raise ConfigError(
            field,
            f"not a valid URL: {redact(url)} (percent-encode a password's special characters: "
            "%2F for /, %23 for #, %3F for ?, %40 for @)",
        )
    try:
        parts = urlsplit(url)
        port = None if parts.scheme in SENTINEL_SCHEMES else parts.port
    except ValueError:
        raise ConfigError(field, f"not a valid URL (port or characters): {redact(url)}") from None
    if parts.scheme not in SCHEMES:
        raise ConfigError(field, f"unsupported scheme in {redact(url)}: {_SCHEME_HINT}")
    url_options(url, field)
    if not credentials and "@" in parts.netloc:
        raise ConfigError(
            field, f"must not carry credentials ({redact(url)}); use spec.auth.secretRef"
        )
    if parts.scheme in SENTINEL_SCHEMES:
        sentinel_hosts(url, field)
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise ConfigError(field, f"sentinel URL needs the service name: {redact(url)}")
        if len(path) > 2 or (len(path) == 2 and digits(path[1]) is None):
            raise ConfigError(
                field, f"sentinel URL path is /SERVICE or /SERVICE/DB (a number): {redact(url)}"
            )
    elif parts.scheme == "unix":
        if not parts.path:
            raise ConfigError(field, f"unix URL needs a socket path: {redact(url)}")
    elif not parts.hostname:
        raise ConfigError(field, f"URL needs a host: {redact(url)}")
    elif port == 0:
        raise ConfigError(field, f"bad port in {redact(url)}")
    return url


def digits(raw: str) -> int | None:
    """The number ``raw`` spells in ASCII digits only, else None.

    ``str.isdigit`` accepts superscripts (``"²"``, which ``int`` refuses) and ``int`` accepts
    other scripts' digits, signs, spaces and underscores: neither alone is a number check."""
    return int(raw) if raw.isascii() and raw.isdigit() else None


def _count(low: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        value = digits(raw)
        if value is None or value < low:
            raise ValueError(f"an integer >= {low}")
        return value

    return parse


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < 86400:
        raise ValueError("seconds, a number > 0")
    return value


def _flag(raw: str) -> bool:
    if raw.lower() not in ("true", "false", "yes", "no", "1", "0"):
        raise ValueError("true or false")
    return raw.lower() in ("true", "yes", "1")


def _text(raw: str) -> str:
    if not raw:
        raise ValueError("a non-empty string")
    return raw


# The URL query options a node URL may carry, each with its type (what redis-py would do with
# it, checked first). Everything else is refused: an option must never change where a
# connection goes (``port``, ``host``, ``path``: the node's name would no longer say it), how it
# is verified (``ssl_cert_reqs``, ``ssl_check_hostname``: TLS settings come from the TLS
# flags or the spec's Secrets) or carry credentials.
URL_OPTIONS: dict[str, Callable[[str], Any]] = {
    "db": _count(0),
    "socket_timeout": _seconds,
    "socket_connect_timeout": _seconds,
    "socket_keepalive": _flag,
    "health_check_interval": _count(0),
    "max_connections": _count(1),
    "client_name": _text,
    "ssl_ca_certs": _text,
}
_TLS_OPTIONS = ("ssl_ca_certs",)  # redis-py's plain connections refuse these (TypeError)
_TCP_OPTIONS = ("socket_keepalive",)  # and its unix socket connections these
_REFUSED_OPTIONS = {
    **dict.fromkeys(CREDENTIAL_PARAMS, "credentials in the query string"),
    **dict.fromkeys(("port", "host", "path"), "the URL's host and port say where the node is"),
    **dict.fromkeys(
        ("ssl_cert_reqs", "ssl_check_hostname", "ssl_certfile", "ssl_keyfile"),
        "TLS verification is set by the --tls-* flags or spec.tls",
    ),
}


def url_options(url: str, field: str = "--redis") -> dict[str, Any]:
    """The typed query options of ``url`` (allow-listed in :data:`URL_OPTIONS`); an unknown,
    refused, repeated or ill-typed option is a :class:`ConfigError` naming it."""
    out: dict[str, Any] = {}
    for key, raw in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        name = key.lower()
        if name in CREDENTIAL_PARAMS:
            raise ConfigError(
                field,
                f"credentials in the query string of {redact(url)}: give the password through "
                "REDLEASE_PASSWORD / --password or a Secret (spec.auth.secretRef)",
            )
        if name in _REFUSED_OPTIONS:
            raise ConfigError(
                field, f"URL option {key!r} is not accepted ({_REFUSED_OPTIONS[name]})"
            )
        parse = URL_OPTIONS.get(key)
        if parse is None:
            raise ConfigError(
                field,
                f"unknown URL option {key!r} in {redact(url)} (accepted: {', '.join(URL_OPTIONS)})",
            )
        if key in out:
            raise ConfigError(field, f"URL option {key!r} given twice")
        scheme = urlsplit(url).scheme
        if key in _TLS_OPTIONS and not scheme.startswith("rediss"):
            raise ConfigError(field, f"URL option {key!r} applies to rediss:// URLs only")
        if key in _TCP_OPTIONS and scheme == "unix":
            raise ConfigError(field, f"URL option {key!r} does not apply to unix:// sockets")
        try:
            out[key] = parse(raw)
        except ValueError as exc:
            raise ConfigError(field, f"URL option {key}={raw!r}: expected {exc}") from None
    return out


def sentinel_hosts(url: str, field: str = "--redis") -> list[tuple[str, int]]:
    """The Sentinel addresses of ``redis+sentinel://[user:pass@]h1:p1,h2:p2/service``."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    hosts = []
    for item in netloc.split(","):
        if item.startswith("["):  # [IPv6]:port
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ("26379" if not rest else "")
        else:
            host, sep, port = item.rpartition(":")
            if not sep:
                host, port = item, "26379"
        number = digits(port)
        if not host or number is None or not 0 < number < 65536:
            raise ConfigError(field, f"bad Sentinel address in {redact(url)}")
        hosts.append((host, number))
    return hosts


def node_name(url: str) -> str:
    """A short, secret-free name for the node of ``url``: ``host:port``, ``unix:/path`` or
    ``sentinel:service`` (the same names the drivers use in errors)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix:{parts.path}"
    if parts.scheme in SENTINEL_SCHEMES:
        return f"sentinel:{parts.path.strip('/').split('/')[0]}"
    host = parts.hostname or "?"
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port or 6379}"


# --- consent ---------------------------------------------------------------------------------


def address_name(scheme: str, host: str, port: int) -> str:
    """The consent name of one TCP address reached with ``scheme``: ``scheme://host:port``
    (host lower-case, IPv6 in brackets)."""
    host = host.lower()
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def consent_names(url: str) -> frozenset[str]:
    """What a node URL must be allowed as before credentials go to it: its scheme, host and
    effective port (``redis://h:6379``, ``rediss://h:6379``, ``unix:///path``); a Sentinel URL
    gives one ``redis+sentinel://host:port/service`` per Sentinel it names. Query options and
    the database never count: none of them may change where a connection goes
    (:data:`URL_OPTIONS`)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return frozenset({f"unix://{parts.path}"})
    if parts.scheme in SENTINEL_SCHEMES:
        service = unquote(parts.path.strip("/").split("/")[0])
        return frozenset(
            f"{address_name(parts.scheme, h, p)}/{service}" for h, p in sentinel_hosts(url)
        )
    return frozenset({address_name(parts.scheme, parts.hostname or "", parts.port or 6379)})


def _allowed_entries(text: str) -> list[str]:
    """The entries of a comma-separated allowed-nodes list; a Sentinel entry keeps its own
    commas (``redis+sentinel://h1:p1,h2:p2/service``): it runs up to its service path."""
    entries: list[str] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        last = entries[-1] if entries else ""
        if last.startswith(SENTINEL_SCHEMES) and "/" not in last.partition("://")[2]:
            entries[-1] = f"{last},{item}"
        else:
            entries.append(item)
    return entries


@dataclass(frozen=True, slots=True)
class Consent:
    """The nodes whose owner lets credentials go to them, as :func:`consent_names` spells
    them. A node allowed as ``rediss://`` is not allowed over plain ``redis://``."""

    names: frozenset[str]

    @classmethod
    def parse(cls, text: str, field: str) -> Consent:
        """An allowed-nodes list: node URLs (``redis://h:p``, ``rediss://h:p``,
        ``unix:///path``, ``redis+sentinel://h1:p1,h2:p2/service``), comma-separated. A bare
        ``host:port`` allows that node over TLS only (``rediss://``); a bare
        ``sentinel:service`` allows nothing (it names no Sentinel)."""
        names: set[str] = set()
        for entry in _allowed_entries(text):
            if entry.startswith("sentinel:"):
                continue
            if entry.startswith("unix:") and not entry.startswith("unix://"):
                entry = f"unix://{entry[5:]}"
            elif "://" not in entry:
                entry = f"rediss://{entry}"
            validate_url(entry, field, credentials=False)
            names |= consent_names(entry)
        return cls(frozenset(names))

    def refused(self, urls: Sequence[str]) -> list[str]:
        """The URLs (redacted) with a consent name this consent does not cover."""
        return [redact(u) for u in urls if not consent_names(u) <= self.names]

    def allows_master(self, scheme: str, host: str, port: int) -> bool:
        """Whether a master a Sentinel named may get credentials: it is reached over TLS for
        ``rediss+sentinel://`` (allowed as ``rediss://``), else as ``redis://``."""
        master = "rediss" if scheme.startswith("rediss") else "redis"
        return address_name(master, host, port) in self.names

    def masters(self) -> tuple[str, ...]:
        """The entries a Sentinel's master may match (``redis://`` and ``rediss://`` names),
        sorted: what an injected sidecar is told (``--allowed-master``)."""
        return tuple(sorted(n for n in self.names if n.startswith(("redis://", "rediss://"))))

    def __and__(self, other: Consent | None) -> Consent:
        return self if other is None else Consent(self.names & other.names)


def check_consent(
    consent: Consent,
    urls: Sequence[str],
    field: str = "spec.nodes",
    whose: str = "the credentials' owner",
) -> None:
    """Raise :class:`ConfigError` (naming ``field`` and the refused URLs, never what is
    allowed) unless ``consent`` covers every URL."""
    refused = consent.refused(urls)
    if refused:
        plain = any(u.startswith("redis://") for u in refused)
        hint = "; an allowed entry without a scheme means TLS only (rediss://)" if plain else ""
        raise ConfigError(
            field, f"{whose} does not consent to credentials going to {', '.join(refused)}{hint}"
        )


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
