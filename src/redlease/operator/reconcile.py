"""From an observation to a status, a patch and events: the operator's decisions, all pure.

* :func:`compute_status` turns a :class:`LockSpec` + :class:`Observation` into the ``status``
  the CRD documents; :func:`invalid_status` does the same for a spec that failed validation.
* :func:`status_patch` is the change detection: ``None`` when nothing worth writing changed.
  ``expiresAt`` alone is rewritten only when the stored value would go stale before the next
  refresh or the lease got shorter, so renewals do not cause a write per refresh (the same for
  each ``holders[].expiresAt`` of a counting semaphore).
* :func:`decide_events` names the Kubernetes Events to post for a transition.
* Fields the CRD does not declare (:func:`redlease.kube.fields.unknown_fields`; the API server
  prunes them, so they reach the operator only past a non-pruning path) do not make a lock
  Invalid -- its sidecars run on the fields they know -- but an ``UnknownFields`` condition
  names them with a did-you-mean, and a Warning Event says so once per change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redlease.core.state import Holder
from redlease.core.times import format_time, parse_time
from redlease.core.view import LockView
from redlease.errors import ConfigError
from redlease.kube.spec import LockSpec

FREE, HELD, DEGRADED, UNAVAILABLE, INVALID = "Free", "Held", "Degraded", "Unavailable", "Invalid"
NORMAL, WARNING = "Normal", "Warning"
UNKNOWN_FIELDS = "UnknownFields"  # the condition's type and the Warning Event's reason

# Fields whose change always triggers a status write.
_TRACKED = (
    "phase",
    "holder",
    "fencingToken",
    "lastFencingToken",
    "nodes",
    "healthyNodes",
    "totalNodes",
    "quorum",
    "unhealthyNodes",
    "candidates",
    "readers",
    "waiters",
    "transitions",
    "lastTransitionTime",
    "observedGeneration",
    "keys",
    "nodeSet",
)


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Event to post on the DistributedLock."""

    type: str
    reason: str
    message: str


def _condition(
    type_: str, status: bool | None, reason: str, message: str, generation: int | None
) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": type_,
        "status": "Unknown" if status is None else "True" if status else "False",
        "reason": reason,
        "message": message,
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def _merge_conditions(
    new: list[dict[str, Any]], previous: Mapping[str, Any], now: float
) -> list[dict[str, Any]]:
    """Keep a condition's ``lastTransitionTime`` unless its status flipped."""
    old = {c.get("type"): c for c in previous.get("conditions") or [] if isinstance(c, Mapping)}
    out = []
    for cond in new:
        prev = old.get(cond["type"])
        since = prev.get("lastTransitionTime") if prev else None
        if prev is None or prev.get("status") != cond["status"] or not since:
            since = format_time(now)
        out.append({**cond, "lastTransitionTime": since})
    return out


def phase_of(view: LockView) -> str:
    """Unavailable (no quorum answered), Degraded (a node is down, or the holder cannot be
    named), else Held or Free."""
    if not view.nodes.reachable:
        return UNAVAILABLE
    if view.unhealthy_nodes or view.unknown:
        return DEGRADED
    return HELD if view.held else FREE


def compute_status(
    spec: LockSpec,
    view: LockView,
    *,
    read_at: float,
    generation: int | None,
    previous: Mapping[str, Any],
    now: float,
    unknown: Sequence[ConfigError] = (),
) -> dict[str, Any]:
    """The full ``status`` for a valid spec, rendered from the lock view (absent fields are
    simply not in the dict). ``read_at``: wall-clock seconds when the nodes were read;
    ``unknown``: the object's undeclared fields (:func:`unknown_condition`)."""
    phase = phase_of(view)
    nodes = view.nodes
    status: dict[str, Any] = {
        "phase": phase,
        "nodes": f"{nodes.healthy}/{nodes.total}",
        "healthyNodes": nodes.healthy,
        "totalNodes": nodes.total,
        "quorum": nodes.quorum,
        "keys": ",".join(spec.keys),  # printer columns cannot join a list
        "nodeSet": ",".join(spec.node_names),
    }
    if view.unhealthy_nodes:
        status["unhealthyNodes"] = list(view.unhealthy_nodes)
    if view.holder is not None:
        status["holder"] = view.holder
        if view.fencing_token is not None:
            status["fencingToken"] = view.fencing_token
        if view.expires_in_ms is not None:
            status["expiresAt"] = format_time(read_at + view.expires_in_ms / 1000)
    if spec.holders > 1 and view.holders:
        status["holders"] = [_holder(h, read_at) for h in view.holders]
    if view.healthy_nodes:
        status["lastFencingToken"] = view.last_fence
        status["transitions"] = view.transitions
        status["readers"] = view.readers
        status["waiters"] = view.waiters
        if view.candidates:
            status["candidates"] = list(view.candidates)
        if view.last_transition_ms is not None:
            status["lastTransitionTime"] = format_time(view.last_transition_ms / 1000)
    if generation is not None:
        status["observedGeneration"] = generation
    if view.unknown is not None:
        held: tuple[bool | None, str, str] = (None, "HolderUnknown", view.unknown)
    elif view.holder is not None:
        held = (True, "Held", f"held by {view.holder} with fencing token {view.fencing_token}")
    elif view.readers:
        held = (True, "Held", f"held by {view.readers} reader(s)")
    else:
        held = (False, "NotHeld", "no holder")
    conditions = [
        _condition("Valid", True, "SpecValid", "spec is valid", generation),
        _condition(
            "Available",
            nodes.reachable,
            "QuorumReachable" if nodes.reachable else "QuorumLost",
            f"{nodes.healthy} of {nodes.total} nodes answered and count, quorum {nodes.quorum}"
            + _errors_text(view),
            generation,
        ),
        _condition("Held", held[0], held[1], held[2], generation),
    ]
    if spec.paused:
        conditions.append(_condition("Paused", True, "Paused", "no new acquisitions", generation))
    conditions += unknown_condition(unknown, generation)
    status["conditions"] = _merge_conditions(conditions, previous, now)
    return status


def unknown_condition(
    unknown: Sequence[ConfigError], generation: int | None
) -> list[dict[str, Any]]:
    """``[]``, or the ``UnknownFields`` condition naming every undeclared field (path and
    did-you-mean, never a value: a misplaced field may hold a password)."""
    if not unknown:
        return []
    message = "; ".join(str(error) for error in unknown)
    return [_condition(UNKNOWN_FIELDS, True, UNKNOWN_FIELDS, message, generation)]


def _holder(holder: Holder, read_at: float) -> dict[str, Any]:
    """One entry of ``status.holders`` (a holder the view agrees on)."""
    entry: dict[str, Any] = {"holder": holder.identity, "fencingToken": holder.fencing_token}
    if holder.expires_in_ms is not None:
        entry["expiresAt"] = format_time(read_at + holder.expires_in_ms / 1000)
    return entry


def _errors_text(view: LockView) -> str:
    text = ""
    if view.errors:
        text += "; unreachable: " + "; ".join(f"{n}: {why}" for n, why in view.errors.items())
    if view.outside:
        text += "; not counting: " + "; ".join(f"{n}: {o.why}" for n, o in view.outside.items())
    return text


def invalid_status(
    error: ConfigError,
    *,
    generation: int | None,
    previous: Mapping[str, Any],
    now: float,
    unknown: Sequence[ConfigError] = (),
) -> dict[str, Any]:
    """The status of an object whose spec failed validation: the condition names the field
    (and ``UnknownFields`` the undeclared ones, which may be why: ``ttlSecond``)."""
    status: dict[str, Any] = {"phase": INVALID}
    if generation is not None:
        status["observedGeneration"] = generation
    conditions = [_condition("Valid", False, "InvalidSpec", str(error), generation)]
    conditions += unknown_condition(unknown, generation)
    status["conditions"] = _merge_conditions(conditions, previous, now)
    return status


def _holders_of(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [h for h in status.get("holders") or [] if isinstance(h, Mapping)]


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: status.get(k) for k in _TRACKED}
    out["holders"] = [(h.get("holder"), h.get("fencingToken")) for h in _holders_of(status)]
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"}
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    ]
    return out


def status_patch(
    previous: Mapping[str, Any], new: Mapping[str, Any], *, now: float, refresh: float
) -> dict[str, Any] | None:
    """A merge patch turning ``previous`` into ``new``, or ``None`` if no write is needed.

    Keys present before but absent now are set to ``None`` (deleted by the merge patch).
    """
    changed = _comparable(previous) != _comparable(new)
    if not changed:
        changed = any(
            _expiry_changed(old, new_exp, now, refresh)
            for old, new_exp in zip(_expiries(previous), _expiries(new), strict=True)
        )
    if not changed:
        return None
    patch: dict[str, Any] = {k: None for k in previous if k not in new}
    patch.update(new)
    return patch


def _expiries(status: Mapping[str, Any]) -> list[Any]:
    """The lease ends a status shows: ``expiresAt``, then each holder's (same holders on both
    sides once :func:`_comparable` found no change)."""
    return [status.get("expiresAt"), *(h.get("expiresAt") for h in _holders_of(status))]


def _expiry_changed(old: Any, new: Any, now: float, refresh: float) -> bool:
    old_exp, new_exp = parse_time(old), parse_time(new)
    if old_exp is None or new_exp is None:
        return (old_exp is None) != (new_exp is None)
    stale_soon = old_exp < now + refresh  # would be in the past before the next look
    shorter = new_exp < old_exp - 1.0  # the lease was re-granted with less time
    return stale_soon or shorter


def decide_events(
    previous: Mapping[str, Any], new: Mapping[str, Any], invalid: ConfigError | None = None
) -> list[Event]:
    """Events for the change from ``previous`` to ``new`` status (empty when nothing to say)."""
    events: list[Event] = []
    unknown = _message_of(new, UNKNOWN_FIELDS)
    if unknown is not None and unknown != _message_of(previous, UNKNOWN_FIELDS):
        events.append(Event(WARNING, UNKNOWN_FIELDS, f"ignored: {unknown}"))
    if new.get("phase") == INVALID:
        if invalid is not None and (
            previous.get("phase") != INVALID or _message_of(previous, "Valid") != str(invalid)
        ):
            events.append(Event(WARNING, "InvalidSpec", f"spec is invalid: {invalid}"))
        return events
    old_holder, new_holder = previous.get("holder"), new.get("holder")
    if new.get("phase") != UNAVAILABLE and old_holder != new_holder:
        if new_holder is not None:
            was = f" (was {old_holder})" if old_holder else ""
            events.append(
                Event(
                    NORMAL,
                    "HolderChanged",
                    f"{new_holder} holds the lock with fencing token "
                    f"{new.get('fencingToken')}{was}",
                )
            )
        else:
            events.append(Event(NORMAL, "Released", f"{old_holder} no longer holds the lock"))
    old_bad = set(previous.get("unhealthyNodes") or [])
    new_bad = set(new.get("unhealthyNodes") or [])
    lost = sorted(new_bad - old_bad)
    back = sorted(old_bad - new_bad) if "healthyNodes" in previous else []
    if lost:
        events.append(Event(WARNING, "NodeLost", f"Redis node(s) not answering: {', '.join(lost)}"))
    if back:
        events.append(Event(NORMAL, "NodeRecovered", f"Redis node(s) back: {', '.join(back)}"))
    if new.get("phase") == UNAVAILABLE and previous.get("phase") != UNAVAILABLE:
        events.append(
            Event(
                WARNING,
                "QuorumLost",
                f"only {new.get('healthyNodes')} of {new.get('totalNodes')} nodes answered, "
                f"quorum is {new.get('quorum')}",
            )
        )
    return events


def _message_of(status: Mapping[str, Any], type_: str) -> str | None:
    """The message of the condition ``type_`` of ``status`` (None: no such condition)."""
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            msg = cond.get("message")
            return msg if isinstance(msg, str) else None
    return None
