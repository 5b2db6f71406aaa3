"""Node URLs: the accepted kinds, their options, secret-free names, and the consent rule.

One place for the grammar of "which Redis" (``redis://``, ``rediss://``, ``unix://``,
``redis+sentinel://``): validation naming the field, the query options redis-py is given,
Sentinel hosts, the redaction used in every log line and error, and the consent list of nodes
a DistributedLock may name. Pure: no client is built here (that is :mod:`redlease.core.connect`,
which with :mod:`redlease.core.quorum.nodeset` builds on this module).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

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


def is_loopback(host: str) -> bool:
    """Whether ``host`` reaches only this machine (this pod): a loopback address or
    ``localhost``; ``0.0.0.0``, ``::`` and every other address or name do not. The one rule
    for where the sidecar may serve without a token and where a plain-http Kubernetes API
    proxy is accepted."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
