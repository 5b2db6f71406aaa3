"""The fields a DistributedLock may have, and the ones it should not (pure): the CRD's declared
fields at every level, and :func:`unknown_fields`, which names a misspelled one with the closest
declared name (the API server would silently drop it)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from redlease.errors import ConfigError

# Every field of a DistributedLock, at every level, as the CRD's openAPIV3Schema declares them
# (a test holds the two together). A name maps to None (a value, or an object whose content is
# not checked here: metadata, status), to a dict (an object with these fields), or to a list of
# one dict (a list of such objects). The API server silently drops what it does not declare
# (a structural schema prunes), so a misspelled optional field would take its default unseen:
# :func:`unknown_fields` names them, as ``kubectl apply --validate=strict`` does.
Fields = Mapping[str, "Fields | list[Fields] | None"]
_SECRET_REF: Fields = {"name": None, "usernameKey": None, "passwordKey": None}
SPEC_FIELDS: Fields = {
    "keys": None,
    "ttlSeconds": None,
    "renewDeadlineSeconds": None,
    "retryPeriodSeconds": None,
    "nodes": [{"url": None}],
    "quorum": None,
    "cluster": None,
    "replicas": None,
    "auth": {"secretRef": _SECRET_REF},
    "tls": {
        "insecureSkipVerify": None,
        "caSecretRef": {"name": None, "key": None},
        "clientCertSecretRef": {"name": None, "certKey": None, "keyKey": None},
    },
    "holders": None,
    "paused": None,
    "preferredHolder": None,
    "strictRestart": None,
}
OBJECT_FIELDS: Fields = {
    "apiVersion": None,
    "kind": None,
    "metadata": None,
    "spec": SPEC_FIELDS,
    "status": None,
}
# What to say where the field's name is not close to one of its level's (keyed by the path of
# the level with list indexes written as []): a node is a URL only.
_LEVEL_HINTS = {
    "spec.nodes[]": "a node has only url; credentials go in spec.auth.secretRef",
}


def unknown_fields(
    obj: object, fields: Fields = OBJECT_FIELDS, where: str = ""
) -> list[ConfigError]:
    """Every field of ``obj`` (a DistributedLock, or the part of one at ``where``) that its
    level does not declare, in document order: a :class:`ConfigError` whose ``field`` is the
    path (``spec.nodes[0].pasword``) and whose message offers the closest declared name
    (``did you mean ttlSeconds?``). Values of the wrong type are :func:`parse_spec`'s to
    report, so they are not descended into."""
    if not isinstance(obj, Mapping):
        return []
    found: list[ConfigError] = []
    for name, value in obj.items():
        path = f"{where}.{name}" if where else str(name)
        if name not in fields:
            found.append(ConfigError(path, _unknown_message(str(name), fields, where)))
            continue
        child = fields[name]
        if isinstance(child, list) and isinstance(value, list):
            for i, item in enumerate(value):
                found += unknown_fields(item, child[0], f"{path}[{i}]")
        elif isinstance(child, Mapping):
            found += unknown_fields(value, child, path)
    return found


def _unknown_message(name: str, fields: Fields, where: str) -> str:
    """``unknown field`` and a did-you-mean: the closest name of the level (difflib, case
    folded), else the level's hint, else the names it has."""
    folded = {known.lower(): known for known in fields}
    close = difflib.get_close_matches(name.lower(), list(folded), n=1, cutoff=0.6)
    if close:
        return f"unknown field (did you mean {folded[close[0]]}?)"
    hint = _LEVEL_HINTS.get(re.sub(r"\[\d+\]", "[]", where))
    return f"unknown field ({hint or 'known here: ' + ', '.join(fields)})"


__all__ = ["OBJECT_FIELDS", "SPEC_FIELDS", "Fields", "unknown_fields"]
